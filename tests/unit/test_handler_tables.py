"""The front ends' method tables: every handler names a params model that
exists, the LSP one the model of the published schema, and ACP's
`initialize` advertises exactly what its table holds."""

from __future__ import annotations

from typing import Any

import pytest

from agentd.acp import handlers as acp_handlers
from agentd.acp import params as acp_params
from agentd.acp.server import AcpServer
from agentd.lsp import ext
from agentd.lsp import handlers as lsp_handlers
from agentd.params import params_model


@pytest.mark.parametrize("method", sorted(ext.REQUESTS))
def test_each_lsp_request_is_validated_with_its_schema_model(method: str) -> None:
    handler = lsp_handlers.REQUESTS[method]
    assert params_model(handler, ext) is ext.REQUESTS[method][0]


@pytest.mark.parametrize("method", sorted(ext.CLIENT_NOTIFICATIONS))
def test_each_lsp_notification_is_validated_with_its_schema_model(method: str) -> None:
    handler = lsp_handlers.NOTIFICATIONS[method]
    assert params_model(handler, ext) is ext.CLIENT_NOTIFICATIONS[method]


def test_the_lsp_tables_hold_the_schema_methods_and_no_others() -> None:
    assert set(lsp_handlers.REQUESTS) == set(ext.REQUESTS)
    assert set(lsp_handlers.NOTIFICATIONS) == set(ext.CLIENT_NOTIFICATIONS)


@pytest.mark.parametrize("method", sorted(acp_handlers.HANDLERS))
def test_each_acp_handler_names_a_params_model(method: str) -> None:
    model = params_model(acp_handlers.HANDLERS[method], acp_params)
    assert issubclass(model, acp_params.AcpModel)


def test_a_handler_without_a_model_is_refused_by_name() -> None:
    async def untyped(server: Any, app: Any, request: Any, p: Any) -> None:
        return None

    with pytest.raises(TypeError, match="untyped"):
        params_model(untyped, acp_params)


def test_acp_initialize_advertises_what_the_table_holds(monkeypatch: pytest.MonkeyPatch) -> None:
    def advertised() -> dict[str, Any]:
        result = AcpServer(lambda data: None).initialize({"protocolVersion": 1})
        caps: dict[str, Any] = result["agentCapabilities"]
        return caps

    caps = advertised()
    assert caps["loadSession"] is True
    assert caps["_meta"]["agentd"]["extMethods"] == [
        m for m in acp_handlers.HANDLERS if m.startswith("_")
    ]
    monkeypatch.delitem(acp_handlers.HANDLERS, "session/load")
    monkeypatch.setitem(acp_handlers.HANDLERS, "_agentd/extra", acp_handlers.authenticate)
    caps = advertised()
    assert caps["loadSession"] is False
    assert "_agentd/extra" in caps["_meta"]["agentd"]["extMethods"]
