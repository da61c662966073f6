"""Generated request models whose routes this server does not have yet, and why (see
api/registry.py). Once a route serves one, its entry goes and its fields get registered.

Every request model of the specs is served now, so none is listed; a spec that adds a route
lists its body here (`registry.not_served(Model, reason)`) until the route exists."""
