"""The setting that lets webhook endpoints be local receivers: off as deployed, on under `make dev`, and a typo in it
fails the cold start rather than reading as either."""

from __future__ import annotations

import pytest

from local.template import load_template
from local.worker import function_environment
from precis.settings import SettingsError, get_settings


@pytest.fixture
def fresh_settings():
    get_settings.cache_clear()
    yield get_settings
    get_settings.cache_clear()


def test_it_is_off_unless_set(fresh_settings, monkeypatch):
    monkeypatch.delenv("PRECIS_WEBHOOKS_ALLOW_HTTP_LOCAL", raising=False)
    assert fresh_settings().webhooks_allow_http_local is False
    monkeypatch.setenv("PRECIS_WEBHOOKS_ALLOW_HTTP_LOCAL", "TRUE")
    fresh_settings.cache_clear()
    assert fresh_settings().webhooks_allow_http_local is True


@pytest.mark.parametrize("typo", ["yes", "1", "ture"])
def test_a_value_other_than_true_or_false_fails_the_cold_start(fresh_settings, monkeypatch, typo):
    monkeypatch.setenv("PRECIS_WEBHOOKS_ALLOW_HTTP_LOCAL", typo)
    with pytest.raises(SettingsError, match=f"PRECIS_WEBHOOKS_ALLOW_HTTP_LOCAL='{typo}'"):
        fresh_settings()


def test_make_dev_turns_it_on_and_the_developer_may_turn_it_off(monkeypatch):
    tpl = load_template()
    fn = next(iter(tpl.functions.values()))
    assert "PRECIS_WEBHOOKS_ALLOW_HTTP_LOCAL" not in fn.environment  # the template leaves it at its default
    monkeypatch.delenv("PRECIS_WEBHOOKS_ALLOW_HTTP_LOCAL", raising=False)
    assert function_environment(tpl, fn, "http://127.0.0.1:9")["PRECIS_WEBHOOKS_ALLOW_HTTP_LOCAL"] == "true"
    monkeypatch.setenv("PRECIS_WEBHOOKS_ALLOW_HTTP_LOCAL", "false")
    assert function_environment(tpl, fn, "http://127.0.0.1:9")["PRECIS_WEBHOOKS_ALLOW_HTTP_LOCAL"] == "false"
