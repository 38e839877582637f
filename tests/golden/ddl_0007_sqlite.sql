CREATE TRIGGER raw_messages_counter AFTER INSERT ON raw_messages
FOR EACH ROW BEGIN
UPDATE agent_sessions SET last_sequence = NEW.sequence, updated_at = max(updated_at, NEW.created_at)
WHERE id = NEW.session_id AND last_sequence = NEW.sequence - 1 AND deleted_at IS NULL;
END
;
