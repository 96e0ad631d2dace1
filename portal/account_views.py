"""The account pages: display time zone and job mail (``/account/``) and API tokens.

The "API tokens" page (``/account/tokens/``): a user's own tokens, made and revoked here.

Every signed-in user manages their own tokens and sees nobody else's (another user's token
id is a 404). A new token's secret is in the answer to the POST that made it, once: the
page is rendered, not redirected, and marked ``no-store`` so no cache keeps it. Writes go
through ``core.tokens``.
"""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods, require_POST

from core import timezones, tokens
from core.api import client_ip
from core.models import ApiToken, Profile
from core.query_forms import takes_query
from scheduling.job_mail import set_job_mail_preference
from scheduling.models import JobMail
from scheduling.selectors import get_job_mail_kinds


class TokenForm(forms.Form):
    """Name and life of a new token."""

    name = forms.CharField(max_length=tokens.MAX_NAME, label="Name (what it is for)")
    expires_in_days = forms.IntegerField(
        min_value=tokens.MIN_DAYS,
        max_value=tokens.MAX_DAYS,
        initial=tokens.DEFAULT_DAYS,
        label="Expires in (days)",
    )


def _page(request: HttpRequest, form: TokenForm, created=None, secret: str = "", status: int = 200):
    now = timezone.now()
    rows = [tokens.describe(t, now) for t in tokens.live_tokens(request.user)]
    return render(
        request,
        "account/tokens.html",
        {
            "form": form,
            "rows": rows,
            "automation": tokens.automation_token(request.user),
            "created": created,
            "secret": secret,
        },
        status=status,
    )


@never_cache
@login_required
@require_http_methods(["GET", "POST"])
@takes_query()
def token_list(request: HttpRequest) -> HttpResponse:
    """List the caller's tokens; POST makes one and shows its secret this once."""
    if request.method == "GET":
        return _page(request, TokenForm())
    form = TokenForm(request.POST)
    if not form.is_valid():
        return _page(request, form, status=400)
    try:
        token, secret = tokens.create_token(
            request.user,
            form.cleaned_data["name"],
            form.cleaned_data["expires_in_days"],
            source_ip=client_ip(request),
        )
    except tokens.TokenError as exc:
        for field, errors in exc.errors.items():
            for error in errors:
                form.add_error(field if field in form.fields else None, error)
        return _page(request, form, status=400)
    return _page(request, TokenForm(), created=token, secret=secret)


@login_required
@require_POST
def token_revoke(request: HttpRequest, token_id: int) -> HttpResponse:
    """Revoke one of the caller's own tokens (404 for anyone else's)."""
    try:
        token = tokens.revoke_token(request.user, token_id, source_ip=client_ip(request))
    except ApiToken.DoesNotExist:
        raise Http404("No such token.") from None
    messages.success(request, f"Token “{token.name}” ({token.prefix}…) revoked.")
    return redirect("account-tokens")


@login_required
@require_POST
def automation_token_revoke(request: HttpRequest) -> HttpResponse:
    """Revoke the caller's own automation token (``manage.py issue_token``); 404 if none."""
    if not tokens.revoke_automation_token(request.user, source_ip=client_ip(request)):
        raise Http404("You have no automation token.")
    messages.success(request, "Automation token revoked: scripts using it are refused now.")
    return redirect("account-tokens")


class ZoneForm(forms.Form):
    """The zone the pages show times in; empty: the browser's."""

    time_zone = forms.ChoiceField(required=False, label="Show times in")

    def __init__(self, *args, browser_zone: str = "UTC", **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["time_zone"].choices = [
            ("", f"My browser's zone (now: {browser_zone})"),
            *timezones.zone_choices(),
        ]


class JobMailForm(forms.Form):
    """Which events of the user's own jobs are mailed to them (``scheduling.job_mail``)."""

    kinds = forms.MultipleChoiceField(
        choices=JobMail.choices,
        required=False,
        widget=forms.CheckboxSelectMultiple,
        label="Mail me when a job of mine",
    )


JOB_MAIL_FORM = "job-mail"  # the ``form`` field of its POST (the zone form has none)


@never_cache
@login_required
@require_http_methods(["GET", "POST"])
@takes_query()
def account(request: HttpRequest) -> HttpResponse:
    """The user's display time zone (times are stored in UTC; only the display changes)
    and which of their jobs' events are mailed to them."""
    profile, _ = Profile.objects.get_or_create(user=request.user)
    browser_zone = timezones.browser_zone(request) or "UTC"
    zone_form = ZoneForm(initial={"time_zone": profile.time_zone}, browser_zone=browser_zone)
    mail_form = JobMailForm(initial={"kinds": get_job_mail_kinds(request.user)})
    status = 200
    if request.method == "POST" and request.POST.get("form") == JOB_MAIL_FORM:
        mail_form = JobMailForm(request.POST)
        if mail_form.is_valid():
            try:
                pref = set_job_mail_preference(request.user, mail_form.cleaned_data["kinds"])
            except ValidationError as exc:
                for error in exc.message_dict.get("kinds", exc.messages):
                    mail_form.add_error("kinds", error)
            else:
                chosen = [str(label) for value, label in JobMail.choices if value in pref.kinds]
                messages.success(
                    request,
                    f"Job mail to {request.user.email}: {'; '.join(chosen)}."
                    if chosen
                    else "No more mail about your jobs.",
                )
                return redirect("account")
        status = 400
    elif request.method == "POST":
        zone_form = ZoneForm(request.POST, browser_zone=browser_zone)
        if zone_form.is_valid():
            profile.time_zone = zone_form.cleaned_data["time_zone"]
            profile.save(update_fields=["time_zone"])
            shown = profile.time_zone or browser_zone
            messages.success(request, f"Times are now shown in {shown}.")
            return redirect("account")
        status = 400
    context = {
        "form": zone_form,
        "chosen": profile.time_zone,
        "browser_zone": browser_zone,
        "mail_form": mail_form,
        "mail_form_name": JOB_MAIL_FORM,
    }
    return render(request, "account/account.html", context, status=status)
