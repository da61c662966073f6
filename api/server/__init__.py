"""The server itself: the app factory, the `flint` command and its flags, settings,
start-up and shutdown (lifecycle, multi-host), authentication, logs, request ids,
middleware, health and metrics. The dialect packages never import it.
"""
