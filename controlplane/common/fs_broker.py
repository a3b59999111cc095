"""The embedded default's broker: kombu's file-system transport with each message written whole
before any consumer can see it.

kombu's own ``_put`` creates ``<time>_<uuid>.<queue>.msg`` in the folder consumers list, then
locks and writes it; a consumer that lists the folder in between moves and reads an empty file,
and ``loads`` raises in the worker's consumer loop ("Unrecoverable error: JSONDecodeError"), which
ends the worker. Seen on a loaded machine in the demo (a control worker restarted mid-run). Here
a message is written in a staging folder on the same filesystem and renamed into place: a rename
is atomic, so a consumer finds a message whole or not at all.

Settings name this class (``CELERY_BROKER_TRANSPORT``) with the staging folder among the
transport options (``staging_folder``), next to the folders kombu reads.
"""
from __future__ import annotations

import os
import uuid
from time import monotonic_ns

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps
from kombu.utils.objects import cached_property


class Channel(filesystem.Channel):
    """kombu's file-system channel, its messages put by an atomic rename."""

    @cached_property
    def staging_folder(self) -> str:
        """Where a message is written before it is renamed into ``data_folder_out`` (the same
        filesystem: a rename across filesystems is a copy, which is not atomic)."""
        return self.transport_options.get("staging_folder") or os.path.join(self.data_folder_out, os.pardir, "staging")

    def _put(self, queue, payload, **kwargs):
        """Put ``payload`` on ``queue``: written under a staging name, then renamed to the name
        consumers look for. kombu's names start with the milliseconds of the monotonic clock
        (consumers take the names in sorted order), so two messages of one millisecond came out in
        the order of their uuids, and a name one digit longer sorted first; here the clock's
        nanoseconds, zero-padded, keep the order messages were put."""
        name = f"{monotonic_ns():020d}_{uuid.uuid4()}.{queue}.msg"
        staged = os.path.join(self.staging_folder, name)
        try:
            with open(staged, "wb") as f:
                f.write(str_to_bytes(dumps(payload)))
            os.replace(staged, os.path.join(self.data_folder_out, name))
        except OSError as exc:
            raise ChannelError(f"Cannot add file {name!r} to directory {self.data_folder_out!r}") from exc


class Transport(filesystem.Transport):
    """kombu's file-system transport with :class:`Channel`."""

    Channel = Channel
