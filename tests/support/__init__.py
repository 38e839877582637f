"""Test helpers: the test targets and their servers, throwaway servers, data builders."""
