"""Sign-in pages: Django's, with login throttling's refusal said plainly (and a 429)."""
from __future__ import annotations

from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth import views as auth_views
from django.contrib.auth.forms import AuthenticationForm
from django.core.exceptions import ValidationError

from controlplane.accounts import throttle


class _SaysWhenThrottled:
    """A failed sign-in whose username or address is now over its limit says so, and for how
    long, instead of "didn't match" (the password is not checked while refused)."""

    def clean(self):
        try:
            return super().clean()
        except ValidationError:
            refused = throttle.refusal(username=self.cleaned_data.get("username") or "",
                                       address=throttle.client_address(self.request))
            if refused is not None:
                self.refusal = refused
                raise ValidationError(refused.message(), code="throttled") from None
            raise


class LoginForm(_SaysWhenThrottled, AuthenticationForm):
    error_messages = {**AuthenticationForm.error_messages,
                      "invalid_login": "Your username and password didn't match. Please try again."}


class AdminLoginForm(_SaysWhenThrottled, AdminAuthenticationForm):
    pass


class LoginView(auth_views.LoginView):
    """``/login/``: a throttled sign-in is answered 429 with ``Retry-After``."""

    form_class = LoginForm
    template_name = "login.html"

    def form_invalid(self, form):
        response = super().form_invalid(form)
        refused = getattr(form, "refusal", None)
        if refused is not None:
            response.status_code = 429
            response["Retry-After"] = str(refused.retry_after_s)
        return response
