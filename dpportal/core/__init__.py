"""The portal's plumbing shared by every concept: where files live, uploads, object storage,
number formatting, form fields, security headers, error pages, heartbeats and the home page."""
