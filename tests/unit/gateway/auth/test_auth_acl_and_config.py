"""ACL matching, forced header filters and the auth config file."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from gateway.auth.acl import Acl, Action, ForcedFilter, Rule
from gateway.auth.config import load_auth_config
from gateway.auth.errors import AuthConfigError, Forbidden
from gateway.auth.gatekeeper import Gatekeeper, gatekeeper_from_settings
from gateway.auth.keys import hash_api_key
from gateway.auth.principal import Principal
from gateway.settings import GatewaySettings, settings_from_env

ALICE = Principal("alice", "api_key")
TENANT_A = Principal("app-1", "jwt", {"tenant": "a", "roles": ["reader", "ops"]})


def acl() -> Acl:
    return Acl(
        [
            Rule(
                ("alice",), ("orders", "orders.*"), frozenset({Action.PUBLISH, Action.SUBSCRIBE}),
                ("billing-*",)
            ),
            Rule(("claim:tenant=a",), ("shared",), frozenset({Action.SUBSCRIBE})),
            Rule(("claim:roles=ops",), ("ops-*",), frozenset({Action.ADMIN})),
            Rule(("*",), ("public",), frozenset({Action.SUBSCRIBE})),
        ],
        [ForcedFilter(("claim:tenant=a",), {"tenant": "a"})],
    )


def test_rules_grant_actions_on_matching_topics_and_groups_only() -> None:
    rules = acl()
    assert rules.allows(ALICE, Action.PUBLISH, "orders")
    assert rules.allows(ALICE, Action.SUBSCRIBE, "orders.eu", "billing-1")
    assert not rules.allows(ALICE, Action.SUBSCRIBE, "orders", "shipping")
    assert not rules.allows(ALICE, Action.ADMIN, "orders")
    assert not rules.allows(ALICE, Action.PUBLISH, "ordersx")


def test_publishing_dead_letters_needs_a_dlq_pattern() -> None:
    rules = Acl([Rule(("alice",), ("orders.*", "*"), frozenset(Action)),
                 Rule(("bob",), ("orders.dlq",), frozenset({Action.PUBLISH})),
                 Rule(("carol",), ("*.dlq",), frozenset({Action.PUBLISH}))])
    assert not rules.allows(ALICE, Action.PUBLISH, "orders.dlq")
    assert rules.allows(ALICE, Action.SUBSCRIBE, "orders.dlq")
    assert rules.allows(ALICE, Action.ADMIN, "orders.dlq")
    assert rules.allows(ALICE, Action.PUBLISH, "orders.eu")
    assert rules.allows(Principal("bob", "api_key"), Action.PUBLISH, "orders.dlq")
    assert not rules.allows(Principal("bob", "api_key"), Action.PUBLISH, "billing.dlq")
    assert rules.allows(Principal("carol", "api_key"), Action.PUBLISH, "billing.dlq")


def test_everything_not_granted_is_denied() -> None:
    assert not Acl([]).allows(ALICE, Action.SUBSCRIBE, "orders")
    assert not acl().allows(Principal("mallory", "api_key"), Action.PUBLISH, "orders")


def test_claim_selectors_match_scalar_and_list_claims() -> None:
    rules = acl()
    assert rules.allows(TENANT_A, Action.SUBSCRIBE, "shared")
    assert rules.allows(TENANT_A, Action.ADMIN, "ops-x")
    assert not rules.allows(Principal("b", "jwt", {"tenant": "b"}), Action.SUBSCRIBE, "shared")


def test_star_selects_every_authenticated_principal() -> None:
    assert acl().allows(Principal("anyone", "api_key"), Action.SUBSCRIBE, "public")


def test_open_acl_allows_everything_and_forces_nothing() -> None:
    assert Acl.open().allows(ALICE, Action.ADMIN, "anything", "any-group")
    assert Acl.open().forced_headers(TENANT_A) == {}


def test_forced_headers_come_from_matching_filters() -> None:
    assert acl().forced_headers(TENANT_A) == {"tenant": "a"}
    assert acl().forced_headers(ALICE) == {}


def test_conflicting_forced_filters_forbid() -> None:
    rules = Acl(
        [], [ForcedFilter(("app-1",), {"tenant": "a"}), ForcedFilter(("*",), {"tenant": "b"})]
    )
    with pytest.raises(ValueError, match="disagree"):
        rules.forced_headers(TENANT_A)


def test_group_is_knowable_only_by_a_group_pattern() -> None:
    rules = Acl([Rule(("alice",), ("orders",), frozenset({Action.SUBSCRIBE}), ("billing-*",))])
    assert rules.may_know_group(ALICE, "billing-x")
    assert not rules.may_know_group(ALICE, "shipping")


def test_stamp_sets_forced_headers_and_forbids_conflicts(tmp_path: Path) -> None:
    gatekeeper = Gatekeeper(load_auth_config(write_config(tmp_path), {"TEST_JWT_SECRET": "k" * 32}))
    headers: list[dict[str, str]] = [{}, {"tenant": "a", "x": "1"}]
    gatekeeper.stamp(TENANT_A, headers)
    assert headers == [{"tenant": "a"}, {"tenant": "a", "x": "1"}]
    with pytest.raises(Forbidden, match="tenant"):
        gatekeeper.stamp(TENANT_A, [{"tenant": "b"}])


SAMPLE = '''
[jwt]
algorithms = ["HS256"]
hmac_secret_env = "TEST_JWT_SECRET"
audience = "streamgate"
leeway_s = 5

[[api_keys]]
principal = "alice"
sha256 = "{alice}"

[[rules]]
principals = ["alice"]
topics = ["orders*"]
actions = ["publish", "subscribe"]

[[filters]]
principals = ["claim:tenant=a"]
headers = {{ tenant = "a" }}
'''


def write_config(tmp_path: Path, text: str | None = None) -> Path:
    path = tmp_path / "auth.toml"
    path.write_text(text if text is not None else SAMPLE.format(alice=hash_api_key("alice-key")))
    return path


def test_config_file_gives_keys_rules_filters_and_jwt(tmp_path: Path) -> None:
    gatekeeper = Gatekeeper(load_auth_config(write_config(tmp_path), {"TEST_JWT_SECRET": "k" * 32}))
    alice = gatekeeper.authenticate_api_key("alice-key")
    assert alice.name == "alice"
    assert gatekeeper.acl.allows(alice, Action.PUBLISH, "orders")
    assert gatekeeper.acl.forced_headers(TENANT_A) == {"tenant": "a"}


def test_secret_from_a_missing_env_variable_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(AuthConfigError, match="TEST_JWT_SECRET is not set"):
        load_auth_config(write_config(tmp_path), {})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[[rules]]\nprincipals=['a']\ntopics=['t']\nactions=['write']\n", "actions"),
        (
            "[[rules]]\nprincipals=['a']\ntopics=['t']\nactions=['publish']\ntopic=['x']\n",
            "unknown keys",
        ),
        ("[[api_keys]]\nprincipal='a'\nsha256='plain-text-key'\n", "64 lower-case hex"),
        (
            "[[rules]]\nprincipals=['claim:tenant']\ntopics=['t']\nactions=['publish']\n",
            "claim:<name>=<value>",
        ),
        ("[jwt]\nalgorithms=['none']\n", "not accepted"),
        ("[jwt]\nhmac_secret_file='missing'\n", "hmac_secret_file"),
        ("[jwt]\njwks_file='missing.json'\n", "jwks file"),
        ("[oops]\n", "unknown keys"),
        ("not toml [", "auth config"),
    ],
)
def test_bad_config_is_refused_with_the_entry_named(
    tmp_path: Path, text: str, message: str
) -> None:
    with pytest.raises(AuthConfigError, match=message):
        load_auth_config(write_config(tmp_path, text), {})


def test_hmac_secret_file_is_read_relative_to_the_config(tmp_path: Path) -> None:
    (tmp_path / "jwt.secret").write_text("f" * 40 + "\n")
    config = load_auth_config(write_config(tmp_path, "[jwt]\nhmac_secret_file='jwt.secret'\n"), {})
    assert config.jwt is not None


def test_auth_mode_none_logs_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        gatekeeper = gatekeeper_from_settings(GatewaySettings(auth_mode="none"), {})
    assert not gatekeeper.required
    assert any(
        "STREAMGATE_AUTH_MODE" in r.message and r.levelno == logging.WARNING for r in caplog.records
    )


def test_auth_is_required_by_default_and_needs_a_config_file() -> None:
    assert settings_from_env({}).auth_mode == "required"
    with pytest.raises(AuthConfigError, match="STREAMGATE_AUTH_CONFIG_PATH"):
        gatekeeper_from_settings(GatewaySettings(), {})


def test_only_operational_paths_may_be_made_public(tmp_path: Path) -> None:
    settings = GatewaySettings(auth_config_path=str(write_config(tmp_path, "")),
                               auth_public_paths=("/healthz", "/v1/topics"))
    with pytest.raises(AuthConfigError, match="/v1/topics"):
        gatekeeper_from_settings(settings, {})


def test_unknown_auth_mode_is_refused() -> None:
    with pytest.raises(AuthConfigError, match="AUTH_MODE"):
        gatekeeper_from_settings(GatewaySettings(auth_mode="off"), {})


LIMITS = '''
[[limits]]
principals = ["claim:tier=gold", "ops"]
messages_per_s = 500
bytes_per_s = 1_048_576.5
reads_per_s = "unlimited"

[[limits]]
principals = ["*"]
subscribes_per_s = 2
'''


def test_first_matching_limit_override_wins(tmp_path: Path) -> None:
    config = load_auth_config(write_config(tmp_path, LIMITS), {})
    assert len(config.limits) == 2
    gold = Principal("x", "jwt", {"tier": "gold"})
    assert config.limits.rates_for(gold) == {"messages_per_s": 500.0, "bytes_per_s": 1048576.5,
                                             "reads_per_s": None}
    assert config.limits.rates_for(Principal("ops", "api_key")) == config.limits.rates_for(gold)
    assert config.limits.rates_for(ALICE) == {"subscribes_per_s": 2.0}
    assert Gatekeeper(config).limit_overrides is config.limits


def test_no_limits_table_means_no_overrides(tmp_path: Path) -> None:
    config = load_auth_config(write_config(tmp_path, ""), {})
    assert len(config.limits) == 0
    assert config.limits.rates_for(ALICE) == {}
    assert len(Gatekeeper(None).limit_overrides) == 0


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "[[limits]]\nprincipals=['a']\nmessages_per_s=0\n",
            r"limits\[0\].messages_per_s: expected a positive",
        ),
        ("[[limits]]\nprincipals=['a']\nreads_per_s=-1\n", r"limits\[0\].reads_per_s"),
        ("[[limits]]\nprincipals=['a']\nbytes_per_s='lots'\n", 'or "unlimited"'),
        ("[[limits]]\nprincipals=['a']\nbytes_per_s=true\n", "bytes_per_s"),
        ("[[limits]]\nprincipals=['a']\nbytes_per_s=inf\n", "bytes_per_s"),
        ("[[limits]]\nprincipals=['a']\nbytes_per_s=nan\n", "bytes_per_s"),
        ("[[limits]]\nprincipals=['a']\n", "give at least one of messages_per_s"),
        (
            "[[limits]]\nprincipals=['a']\nmessage_per_s=5\n",
            r"limits\[0\]: unknown keys \['message_per_s'\]",
        ),
        ("[[limits]]\nmessages_per_s=5\n", r"limits\[0\].principals"),
        (
            "[[limits]]\nprincipals=['a']\nmessages_per_s=1\n[[limits]]\nprincipals=['claim:x']\nreads_per_s=1\n",
            r"limits\[1\].principals: 'claim:x' must look like",
        ),
        ("[limits]\nprincipals=['a']\n", r"\[\[limits\]\]"),
    ],
)
def test_bad_limit_overrides_are_refused_with_the_entry_named(
    tmp_path: Path, text: str, message: str
) -> None:
    with pytest.raises(AuthConfigError, match=message):
        load_auth_config(write_config(tmp_path, text), {})
