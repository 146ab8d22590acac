"""A real LSP client (pytest-lsp) talking to ``python -m msvm_server lsp`` over stdio."""

import sys

import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

SERVER = [sys.executable, "-m", "msvm_server", "lsp"]


async def _session(client: LanguageClient, trusted: bool):
    client.init_result = await client.initialize_session(types.InitializeParams(
        capabilities=types.ClientCapabilities(),
        initialization_options={"workspaceTrusted": trusted, "profileTimeout": 60}))


@pytest_lsp.fixture(config=ClientServerConfig(server_command=SERVER))
async def client(lsp_client: LanguageClient):
    await _session(lsp_client, trusted=False)
    yield
    await lsp_client.shutdown_session()


@pytest_lsp.fixture(config=ClientServerConfig(server_command=SERVER))
async def trusted_client(lsp_client: LanguageClient):
    await _session(lsp_client, trusted=True)
    yield
    await lsp_client.shutdown_session()
