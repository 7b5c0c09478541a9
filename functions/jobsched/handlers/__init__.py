"""Thin Lambda entry points: parse the event, call a service, shape the response."""
