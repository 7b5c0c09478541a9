"""Pure domain: models, schedule math, policies and errors. No AWS, no environment."""
