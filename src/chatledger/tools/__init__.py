"""chatledger's tools: the command line, the demo, the benchmark and the stress runner.

Nothing in the library (:mod:`chatledger.zett`, :mod:`chatledger.rein` and the core they
share) imports this package, so a user's import loads no tool code.
"""
