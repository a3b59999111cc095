"""A follower rank's side of a job on several ranks (:mod:`trainer.ranks`): its life.

Rank 0 leads: it runs the job and tells the others what to do; every other rank calls
:func:`follow`, builds the job the leader announces and does its share of each command.
"""
from __future__ import annotations

import threading
from typing import Any, Callable

from trainer import ranks
from trainer.job import Job
from trainer.watchdog import set_stage


def _refuse_verify(items):
    """A follower's verify_batch."""
    raise RuntimeError("a follower rank never verifies: the leader (rank 0) does, and sends the results")


def follow(on_stop: Callable[[Any], None] | None = None, **job_kwargs) -> dict[str, int]:
    """A follower's life: build the job the leader announces and do what it is told until ``stop``
    (then ``on_stop(job)``, before the job closes). Returns the updates it took part in, the
    groups it generated and, overlapped, the policy version of each batch it generated a share of."""
    job = None
    done = {"updates": 0, "generated_groups": 0}
    generating: threading.Thread | None = None
    failed: list[BaseException] = []

    def serve_generation() -> None:
        """Overlapped: the leader's rollout thread's commands, on the generation channel."""
        try:
            while True:
                name, args = ranks.receive(generation=True)
                if name == "stop":
                    return
                done["generated_groups"] += job.follow_generate(*args)
                done.setdefault("versions", []).append(args[1])
        except BaseException as exc:  # noqa: BLE001 - the main thread raises it
            failed.append(exc)

    try:
        while True:
            set_stage("waiting for the leader")
            name, args = ranks.receive()
            if failed:
                raise failed[0]
            if name == "stop":
                if on_stop is not None and job is not None:
                    on_stop(job)
                if generating is not None:
                    generating.join()  # until the leader's last batch is generated
                    if failed:
                        raise failed[0]
                return done
            if name in ("init", "resume"):
                if name == "init":
                    config, weights_path = args
                    job = Job(config, verify_batch=_refuse_verify, weights_path=weights_path, **job_kwargs)
                else:
                    job = Job.resume(args[0], verify_batch=_refuse_verify, **job_kwargs)
                if job.overlapped:
                    job._versions.start(job.step_count)
                    generating = threading.Thread(target=serve_generation, name="follower-generate", daemon=True)
                    generating.start()
            elif job is None:
                raise RuntimeError(f"command {name!r} before the job was built")
            elif name == "generate":
                done["generated_groups"] += job.follow_generate(*args)
            elif name == "update":
                job.follow_update(*args)
                done["updates"] += 1
            elif name == "params":
                ranks.broadcast_params(job.model)
                job.pipeline.resync()
            elif name == "checkpoint":
                job.save_checkpoint(args[0])
            else:
                raise RuntimeError(f"unknown command {name!r}")
    finally:
        if job is not None:
            job.close()
