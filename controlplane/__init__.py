"""Temper's control plane: the Django project (state, rules, web, API)."""
