"""The chat page at `/`: static files in the package (api/ui/static/), no build step."""
