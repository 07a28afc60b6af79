"""Heartbeats of the long-running processes, so that /healthz shows one that has stopped.

The reaper loop beats once a loop, each Celery worker every DPPORTAL_HEARTBEAT_SECONDS. A beat
is the time it was written, the process's interval and (for a worker) its queues, kept in one
Redis hash on the job broker: every process of the portal reaches the broker, and a beat
written on one machine is read on another. A process is "stopped" once its last beat is older
than STALE_AFTER_BEATS of its own intervals; beats older than FORGET_AFTER_SECONDS are dropped
(a worker that was scaled down for good). With the broker down nothing can beat or be read:
/healthz says so.

`python -m dpportal.core.heartbeats reaper` (or `worker`) is compose's health check of a container:
exit status 0 only if a process of that role on this host beat on time.
"""

import functools
import json
import logging
import os
import socket
import sys
import time

import redis
from django.conf import settings

logger = logging.getLogger(__name__)

HASH_KEY = "dpportal:heartbeats"
STALE_AFTER_BEATS = 3
FORGET_AFTER_SECONDS = 24 * 3600


@functools.lru_cache(maxsize=4)
def _client(url: str) -> redis.Redis:
    """One client (and connection pool) per process: a beat or a read costs one round trip."""
    return redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)


def broker_redis() -> redis.Redis | None:
    """The job broker as a Redis client, or None when the broker is not Redis."""
    url = settings.CELERY_BROKER_URL
    return _client(url) if url.startswith(("redis://", "rediss://")) else None


def process_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def beat(role: str, every: float, *, name: str = "", queues=()) -> bool:
    """Record that this process (`role` "reaper" or "worker") is alive and beats every `every`
    seconds. False, and a log line, when the broker cannot be reached."""
    client = broker_redis()
    if client is None:
        return False
    entry = {
        "role": role,
        "host": socket.gethostname(),
        "at": time.time(),
        "every": every,
        "queues": sorted(queues),
    }
    try:
        client.hset(HASH_KEY, f"{role}:{name or process_name()}", json.dumps(entry))
    except redis.RedisError as exc:
        logger.warning("Cannot record the %s's heartbeat (%s)", role, type(exc).__name__)
        return False
    return True


def summary(now: float | None = None) -> dict:
    """What /healthz shows: for the reaper and for each queue's workers, how many processes
    beat on time ("running"), how many stopped, and the age of the freshest beat; the state
    is "ok", "stopped" or "never seen". Raises redis.RedisError if the broker is unreachable."""
    client = broker_redis()
    if client is None:
        return {"reaper": {"state": "unknown"}, "workers": {}}
    now = time.time() if now is None else now
    entries = _entries(client, now)
    reaper = [e for e in entries if e["role"] == "reaper"]
    queues = {q for e in entries if e["role"] == "worker" for q in e["queues"]}
    return {
        "reaper": _group(reaper, now),
        "workers": {
            queue: _group([e for e in entries if queue in e["queues"]], now)
            for queue in sorted(queues | set(_served_queues()))
        },
    }


def _entries(client: redis.Redis, now: float) -> list[dict]:
    """Every beat kept, dropping those older than FORGET_AFTER_SECONDS."""
    entries, forgotten = [], []
    for field, raw in client.hgetall(HASH_KEY).items():
        entry = json.loads(raw)
        if now - entry["at"] > FORGET_AFTER_SECONDS:
            forgotten.append(field)
        else:
            entries.append(entry)
    if forgotten:
        client.hdel(HASH_KEY, *forgotten)
    return entries


def _served_queues() -> list[str]:
    return [settings.CELERY_TASK_DEFAULT_QUEUE, settings.DPPORTAL_CELERY_LONG_QUEUE]


def _group(entries: list[dict], now: float) -> dict:
    running = [e for e in entries if now - e["at"] <= STALE_AFTER_BEATS * e["every"]]
    group: dict = {
        "state": "ok" if running else "stopped" if entries else "never seen",
        "running": len(running),
        "stopped": len(entries) - len(running),
    }
    if entries:
        group["last_beat_seconds_ago"] = round(now - max(e["at"] for e in entries), 1)
    return group


def beating_on_this_host(role: str) -> bool:
    """Whether a process of `role` on this host beat on time (compose's health check)."""
    client = broker_redis()
    if client is None:
        return False
    now, host = time.time(), socket.gethostname()
    mine = [e for e in _entries(client, now) if e["role"] == role and e.get("host") == host]
    return _group(mine, now)["state"] == "ok"


if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dpportal.settings")
    try:
        sys.exit(0 if beating_on_this_host(sys.argv[1]) else 1)
    except (IndexError, redis.RedisError) as exc:
        sys.exit(f"Cannot check the heartbeat: {type(exc).__name__}")
