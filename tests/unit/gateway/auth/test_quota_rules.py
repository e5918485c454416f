"""``[[quotas]]`` in the auth config: the first entry selecting a principal gives its caps over the
global ones, and a ``tenant`` name makes the principals it selects share one quota."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.auth.config import load_auth_config
from gateway.auth.errors import AuthConfigError, QuotaExceeded
from gateway.auth.gatekeeper import Gatekeeper
from gateway.auth.principal import Principal
from gateway.auth.quotas import QuotaRules, QuotaSubject
from gateway.errors import problem_from

QUOTAS = '''
[[quotas]]
principals = ["claim:tenant=a"]
tenant = "a"
retained_bytes = 1000
in_flight_messages = 10

[[quotas]]
principals = ["ops"]
retained_bytes = "unlimited"

[[quotas]]
principals = ["*"]
in_flight_messages = 5
'''
APP_1 = Principal("app-1", "jwt", {"tenant": "a"})
APP_2 = Principal("app-2", "jwt", {"tenant": "a"})


def write_config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "auth.toml"
    path.write_text(text)
    return path


def test_principals_of_one_tenant_share_its_quota_and_others_count_alone(tmp_path: Path) -> None:
    config = load_auth_config(write_config(tmp_path, QUOTAS), {})
    rules = QuotaRules(Gatekeeper(config).quota_entries, retained_bytes=500, in_flight_messages=50)
    shared = QuotaSubject("tenant:a", 1000, 10)
    assert rules.subject_for(APP_1) == rules.subject_for(APP_2) == shared
    assert rules.subject_for(Principal("ops", "api_key")) == QuotaSubject("principal:ops", None, 50)
    assert rules.subject_for(Principal("bob", "api_key")) == QuotaSubject("principal:bob", 500, 5)
    assert rules.enabled("retained_bytes")
    assert rules.enabled("in_flight_messages")


def test_without_caps_nothing_is_counted() -> None:
    rules = QuotaRules()
    assert not rules.enabled("retained_bytes")
    assert not rules.enabled("in_flight_messages")
    assert rules.subject_for(APP_1) == QuotaSubject("principal:app-1", None, None)


def test_a_quota_entry_alone_enables_its_kind(tmp_path: Path) -> None:
    config = load_auth_config(write_config(tmp_path, QUOTAS), {})
    rules = QuotaRules(config.quotas)
    assert rules.enabled("retained_bytes")
    assert rules.enabled("in_flight_messages")
    assert rules.subject_for(Principal("bob", "api_key")) == QuotaSubject("principal:bob", None, 5)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[[quotas]]\nprincipals=['a']\nretained_bytes=0\n",
         r"quotas\[0\].retained_bytes: expected a positive integer"),
        ("[[quotas]]\nprincipals=['a']\nin_flight_messages=1.5\n", "in_flight_messages"),
        ("[[quotas]]\nprincipals=['a']\nin_flight_messages=true\n", "in_flight_messages"),
        ("[[quotas]]\nprincipals=['a']\n", "give at least one of retained_bytes"),
        ("[[quotas]]\nprincipals=['a']\nretained_bytes=1\ntenant=''\n", r"quotas\[0\].tenant"),
        ("[[quotas]]\nprincipals=['a']\nretained_bytes=1\ntenant=\"a\\tb\"\n", "printable"),
        ("[[quotas]]\nprincipals=['a']\nretained=1\n", r"unknown keys \['retained'\]"),
        ("[[quotas]]\nretained_bytes=1\n", r"quotas\[0\].principals"),
    ],
)
def test_bad_quota_entries_are_refused_with_the_entry_named(tmp_path: Path, text: str,
                                                            message: str) -> None:
    with pytest.raises(AuthConfigError, match=message):
        load_auth_config(write_config(tmp_path, text), {})


def test_quota_refusals_answer_507_for_bytes_and_429_for_in_flight() -> None:
    full = problem_from(QuotaExceeded("no room", "retained_bytes", "tenant:a", 1000, 990, 2.0))
    busy = problem_from(QuotaExceeded("too many", "in_flight_messages", "principal:b", 5, 5, 1.0))
    assert (full.status, full.slug, full.retry_after_s) == (507, "quota-retained-bytes", 2.0)
    assert (busy.status, busy.slug) == (429, "quota-in-flight")
    assert full.body("/x")["limit"] == 1000
    assert full.body("/x")["used"] == 990
