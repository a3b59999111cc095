"""The embedded default's broker (controlplane/common/fs_broker.py): a message is whole or absent
in the folder consumers read, and messages come out in the order they were put. kombu's own
file-system channel creates the message file before writing it, so a consumer listing the folder
then reads an empty message and its worker dies (JSONDecodeError in the consumer loop)."""
from __future__ import annotations

import os

import pytest
from kombu import Connection
from kombu.exceptions import ChannelError
from kombu.transport import filesystem

from controlplane.common import fs_broker


@pytest.fixture
def channel_of(tmp_path):
    def make(transport):
        folders = {name: tmp_path / name for name in ("in", "staging", "processed", "control")}
        for folder in folders.values():
            folder.mkdir(exist_ok=True)
        conn = Connection(transport=transport, transport_options={
            "data_folder_in": str(folders["in"]), "data_folder_out": str(folders["in"]),
            "staging_folder": str(folders["staging"]), "processed_folder": str(folders["processed"]),
            "control_folder": str(folders["control"])})
        opened.append(conn)
        return conn.default_channel

    opened: list[Connection] = []
    yield make
    for conn in opened:
        conn.release()


def seen_while_writing(tmp_path, channel, module, monkeypatch) -> tuple[list[str], list[str]]:
    """Put one message; the consumers' folder while its payload is serialised, and after."""
    during: list[str] = []
    real = module.dumps

    def dumps(payload):
        during.extend(f for f in os.listdir(tmp_path / "in") if f.endswith(".msg"))
        return real(payload)

    monkeypatch.setattr(module, "dumps", dumps)
    channel._put("control", {"body": "x"})
    return during, [f for f in os.listdir(tmp_path / "in") if f.endswith(".msg")]


def test_a_message_appears_only_once_written_whole(tmp_path, channel_of, monkeypatch):
    during, after = seen_while_writing(tmp_path, channel_of(fs_broker.Transport), fs_broker, monkeypatch)
    assert during == [] and len(after) == 1
    assert os.listdir(tmp_path / "staging") == []


def test_kombus_own_channel_shows_the_file_before_it_is_written(tmp_path, channel_of, monkeypatch):
    """The control: what the staging rename prevents."""
    during, after = seen_while_writing(tmp_path, channel_of(filesystem.Transport), filesystem, monkeypatch)
    assert len(during) == 1 and during == after


def test_messages_come_out_whole_and_in_the_order_they_were_put(channel_of):
    channel = channel_of(fs_broker.Transport)
    for n in range(50):
        channel._put("verify", {"n": n, "text": "é" * (n % 7)})
    assert [channel._get("verify") for _ in range(50)] == [{"n": n, "text": "é" * (n % 7)} for n in range(50)]


def test_an_unwritable_staging_folder_is_a_channel_error(tmp_path, channel_of):
    channel = channel_of(fs_broker.Transport)
    os.rmdir(tmp_path / "staging")
    with pytest.raises(ChannelError, match="Cannot add file"):
        channel._put("control", {"body": "x"})
    assert os.listdir(tmp_path / "in") == []
