"""Alerts (controlplane/alerts): where links point, which receivers are allowed, e-mail."""
from __future__ import annotations

import os

from controlplane.settings.env import debug, env_bool, env_int, env_list

TEMPER_PUBLIC_URL = os.environ.get("TEMPER_PUBLIC_URL", "http://localhost:8000")
"""The address users open the app at: the links in webhooks, Slack messages and e-mails."""
TEMPER_ALERT_ALLOW_PRIVATE = env_bool("TEMPER_ALERT_ALLOW_PRIVATE", debug())
"""Deliver to private, loopback and link-local addresses (on in DEBUG, where receivers are local;
off in production, so a rule cannot make the workers reach internal services)."""
TEMPER_ALERT_SWEEP_S = float(env_int("TEMPER_ALERT_SWEEP_S", 15, minimum=1))
"""How often beat sends the alert sweep (stalled runs, finished runs' events, retries due)."""
TEMPER_ALERT_EMAIL_DOMAINS = env_list("TEMPER_ALERT_EMAIL_DOMAINS", "")
"""Mail domains an alert may e-mail besides the addresses of the rule's team members
(``example.com,ops.example.com``); empty: members only."""
"""How often beat sends the alert sweep (stalled runs, finished runs' events, retries due)."""

EMAIL_BACKEND = os.environ.get("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend" if debug()
                               else "django.core.mail.backends.smtp.EmailBackend")
EMAIL_HOST = os.environ.get("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25, minimum=1)
EMAIL_HOST_USER = os.environ.get("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = os.environ.get("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
EMAIL_TIMEOUT = 10
DEFAULT_FROM_EMAIL = os.environ.get("DEFAULT_FROM_EMAIL", "temper@localhost")
