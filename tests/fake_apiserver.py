"""A small Kubernetes API server double for watch tests: aiohttp on 127.0.0.1 in a thread.

It speaks the list/watch protocol the way the real one does, for the paths gpugate
reads (``/api/v1/nodes``, ``/api/v1/pods``, ``/apis/<group>/<version>/<plural>``):

- lists carry ``metadata.resourceVersion`` and honour ``limit``/``continue``; core list
  items come without ``apiVersion``/``kind``, as from the real server;
- ``watch=true`` streams newline-delimited JSON events (chunked) after the requested
  resourceVersion, honours ``timeoutSeconds``, sends BOOKMARKs on :meth:`bookmark`;
- :meth:`preload` fills it before start (benchmarks: ``python tests/fake_apiserver.py
  SNAPSHOT.json PORT`` serves a snapshot file);
- faults on demand: :meth:`expire` (ERROR 410 to open watches, and to watches that
  start before the compaction point), :meth:`drop_watches` (connection cut), ``slow``
  (delay before answering), :meth:`uninstall` (404 as for a CRD that is not installed),
  ``down`` (503 to everything), :meth:`set_hung` (a server that stops answering while
  keeping every TCP connection open: requests wait, open watches deliver nothing, as
  a stopped process or a frozen node; all of it flows again when it resumes);
- the health endpoints ``/readyz``, ``/livez``, ``/version`` (gpugate's probe of the
  API server; counted in ``probes``), and ``POST /_fake/expire`` so that a process
  running the double (benchmarks) can be told to compact from outside;
- discovery (``GET /apis``: each served group, its versions and the preferred one, which
  ``preferred`` overrides) and core/v1 Events (``POST`` to a namespace's events, ``GET`` and
  JSON merge ``PATCH`` of one, with 409 AlreadyExists and the resourceVersion precondition;
  kept in ``events``; ``forbidden`` may hold ``"events"``).

State changes are made from the test thread (:meth:`add`, :meth:`modify`,
:meth:`delete`, :meth:`silently_modify`); they run on the server's loop.
"""

from __future__ import annotations

import asyncio
import copy
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from webhook.kube import RESOURCES, Resource


@dataclass(eq=False)  # identity: each open stream is its own
class _Watch:
    plural: str
    queue: asyncio.Queue[Any] = field(default_factory=asyncio.Queue)


class FakeApiServer:
    def __init__(self, resources: tuple[Resource, ...] = RESOURCES) -> None:
        # Keyed by plural (what tests install, forbid or slow down), or plural.group for a
        # second kind of the same plural (KAI's queues beside Volcano's).
        self.resources: dict[str, Resource] = {}
        for r in resources:
            self.resources[r.plural if r.plural not in self.resources else f"{r.plural}.{r.group}"] = r
        self._ids = {r: key for key, r in self.resources.items()}
        self._by_path = {(r.group, r.plural): key for key, r in self.resources.items()}
        self.installed: set[str] = set(self.resources)
        self.store: dict[str, dict[tuple[str, str], dict[str, Any]]] = {p: {} for p in self.resources}
        self.log: dict[str, list[tuple[int, str, dict[str, Any]]]] = {p: [] for p in self.resources}
        self.rv = 100
        self.compacted = 0          # watches from an older resourceVersion get 410
        self.slow: dict[str, float] = {}    # plural -> seconds to wait before answering a list
        self.slow_watch: float = 0.0
        self.empty_watches = False  # every watch ends at once with no event (a misbehaving proxy)
        self.expire_continue = 0    # this many continued list requests get 410 (token expired)
        self.forbidden: set[str] = set()   # plurals answered 403 (RBAC does not grant them)
        # namespaces being deleted: creating anything in them is refused, as NamespaceLifecycle does
        self.terminating: set[str] = set()
        self.down = False
        self.hung = False           # see set_hung()
        self.probes = 0             # requests to /readyz, /livez, /version answered
        # (plural, "list"|"watch"), ("events", "create"|"get"|"patch")
        self.requests: list[tuple[str, str]] = []
        self.preferred: dict[str, str] = {}   # group -> the version discovery prefers (default: the first)
        self.events: dict[tuple[str, str], dict[str, Any]] = {}   # (namespace, name) -> core/v1 Event
        self._sorted: dict[str, tuple[int, list[tuple[tuple[str, str], dict[str, Any]]]]] = {}
        self._watches: set[_Watch] = set()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.port = 0
        self.fixed_port = 0         # 0: any free port
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self._started = threading.Event()
        self._resumed: asyncio.Event | None = None   # set while not hung (on the server loop)

    # -- lifecycle ------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> FakeApiServer:
        self._thread = threading.Thread(target=self._serve, name="fake-apiserver", daemon=True)
        self._thread.start()
        if not self._started.wait(10):
            raise RuntimeError("fake API server did not start")
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.loop is not None and self._runner is not None:
            self.drop_watches()
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self.loop).result(10)
            self.loop.call_soon_threadsafe(self.loop.stop)
        if self._thread is not None:
            self._thread.join(10)

    def _serve(self) -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        self._resumed = asyncio.Event()
        if not self.hung:
            self._resumed.set()
        app = web.Application()
        for health in ("/readyz", "/livez", "/version"):
            app.router.add_get(health, self._health)
        app.router.add_post("/_fake/expire", self._expire_request)
        app.router.add_get("/apis", self._discovery)
        app.router.add_get("/apis/", self._discovery)
        app.router.add_post("/api/v1/namespaces/{namespace}/events", self._create_event)
        app.router.add_get("/api/v1/namespaces/{namespace}/events/{name}", self._get_event)
        app.router.add_patch("/api/v1/namespaces/{namespace}/events/{name}", self._patch_event)
        app.router.add_get("/api/v1/{plural}", self._handle)
        app.router.add_get("/apis/{group}/{version}/{plural}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", self.fixed_port)
        loop.run_until_complete(site.start())
        server = getattr(site, "_server", None)
        self.port = server.sockets[0].getsockname()[1] if server is not None else 0
        self.loop = loop
        self._started.set()
        loop.run_forever()
        pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for task in pending:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.close()

    def call(self, function: Callable[..., Any], *args: Any) -> Any:
        """Run ``function(*args)`` on the server loop (state is only touched there)."""
        assert self.loop is not None

        async def run() -> Any:
            return function(*args)

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(10)

    def kubeconfig(self) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Config", "current-context": "fake",
                "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
                "users": [{"name": "fake", "user": {"token": "test"}}],
                "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}]}

    # -- state (from the test thread) ---------------------------------------------------
    def _plural(self, obj: dict[str, Any]) -> str:
        group = obj.get("apiVersion", "").rpartition("/")[0]
        found = [p for p, r in self.resources.items() if r.kind == obj["kind"]]
        return next((p for p in found if self.resources[p].group == group), found[0])

    @staticmethod
    def _key(obj: dict[str, Any]) -> tuple[str, str]:
        meta = obj["metadata"]
        return meta.get("namespace", ""), meta["name"]

    def _change(self, event: str, obj: dict[str, Any], announce: bool = True) -> None:
        plural = self._plural(obj)
        resource = self.resources[plural]
        obj = copy.deepcopy(obj)
        obj.setdefault("apiVersion", resource.api_version)
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        if event == "DELETED":
            self.store[plural].pop(self._key(obj), None)
        else:
            self.store[plural][self._key(obj)] = obj
        if not announce:
            return
        self.log[plural].append((self.rv, event, obj))
        for watch in list(self._watches):
            if watch.plural == plural:
                watch.queue.put_nowait((self.rv, event, obj))

    def preload(self, objects: list[dict[str, Any]]) -> None:
        """Fill the store before the server starts (no events): for large benchmarks."""
        assert self.loop is None, "preload before starting the server"
        for obj in objects:
            plural = self._plural(obj)
            obj.setdefault("apiVersion", self.resources[plural].api_version)
            self.rv += 1
            obj.setdefault("metadata", {})["resourceVersion"] = str(self.rv)
            self.store[plural][self._key(obj)] = obj

    def add(self, *objects: dict[str, Any]) -> None:
        for obj in objects:
            self.call(self._change, "ADDED", obj)

    def modify(self, obj: dict[str, Any]) -> None:
        self.call(self._change, "MODIFIED", obj)

    def delete(self, obj: dict[str, Any]) -> None:
        self.call(self._change, "DELETED", obj)

    def silently_modify(self, event: str, obj: dict[str, Any]) -> None:
        """A change no watch will hear of (lost to compaction): only a relist finds it."""
        self.call(self._change, event, obj, False)

    def objects(self) -> list[dict[str, Any]]:
        """Everything the server holds, as a ``kubectl get -o json`` List's items."""
        def collect() -> list[dict[str, Any]]:
            return [copy.deepcopy(o) for plural in self.resources if plural in self.installed
                    for o in self.store[plural].values()]
        return list(self.call(collect))

    def bookmark(self) -> None:
        def send() -> None:
            for watch in list(self._watches):
                watch.queue.put_nowait((self.rv, "BOOKMARK", None))
        self.call(send)

    def expire(self) -> None:
        """Compact: every open watch gets ERROR 410; older resourceVersions are gone."""
        self.call(self._compact)

    def _compact(self) -> None:
        self.compacted = self.rv
        for plural in self.log:
            self.log[plural].clear()
        for watch in list(self._watches):
            watch.queue.put_nowait((self.rv, "GONE", None))

    def drop_watches(self) -> None:
        def run() -> None:
            for watch in list(self._watches):
                watch.queue.put_nowait((self.rv, "DROP", None))
        self.call(run)

    def uninstall(self, plural: str) -> None:
        self.call(self.installed.discard, plural)

    def install(self, plural: str) -> None:
        self.call(self.installed.add, plural)

    def set_down(self, down: bool) -> None:
        def run() -> None:
            self.down = down
            if down:
                for watch in list(self._watches):
                    watch.queue.put_nowait((self.rv, "DROP", None))
        self.call(run)

    def set_hung(self, hung: bool) -> None:
        """Stop answering (True) while keeping every connection open, or resume (False):
        new requests wait without a byte of answer, open watches hold their events back.
        What a client sees of a stopped (SIGSTOP) or frozen API server, or a network path
        that drops packets without resetting anything."""
        def run() -> None:
            self.hung = hung
            assert self._resumed is not None
            if hung:
                self._resumed.clear()
            else:
                self._resumed.set()
        self.call(run)

    async def _wait_resumed(self) -> None:
        if self.hung and self._resumed is not None:
            await self._resumed.wait()

    def stored_events(self) -> list[dict[str, Any]]:
        """The Events written so far, by namespace and name."""
        return list(self.call(lambda: [copy.deepcopy(e) for _, e in sorted(self.events.items())]))

    def count(self, plural: str, what: str) -> int:
        return sum(1 for p, w in list(self.requests) if p == plural and w == what)

    # -- protocol -------------------------------------------------------------------
    @staticmethod
    def _status(code: int, reason: str, message: str) -> web.Response:
        return web.json_response({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                  "message": message, "reason": reason, "code": code}, status=code)

    async def _health(self, request: web.Request) -> web.Response:
        await self._wait_resumed()
        if self.down:
            return web.Response(status=503, text="[-]shutdown failed: reason withheld\nreadyz check failed\n")
        self.probes += 1
        if request.path == "/version":
            return web.json_response({"major": "1", "minor": "28", "gitVersion": "v1.28.7-fake"})
        return web.Response(text="ok")

    async def _expire_request(self, request: web.Request) -> web.Response:
        self._compact()
        return web.Response(text="expired\n")

    async def _discovery(self, request: web.Request) -> web.Response:
        """``GET /apis``: the groups of the installed resources, as an APIGroupList."""
        await self._wait_resumed()
        versions: dict[str, list[str]] = {}
        for plural, resource in self.resources.items():
            if resource.group and plural in self.installed:
                served = versions.setdefault(resource.group, [])
                if resource.version not in served:
                    served.append(resource.version)
        groups = []
        for group, served in versions.items():
            preferred = self.preferred.get(group, served[0])
            listed = [{"groupVersion": f"{group}/{v}", "version": v} for v in served]
            best = {"groupVersion": f"{group}/{preferred}", "version": preferred}
            groups.append({"name": group, "versions": listed, "preferredVersion": best})
        return web.json_response({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})

    def _event_refused(self, what: str) -> web.Response | None:
        self.requests.append(("events", what))
        if self.down:
            return self._status(503, "ServiceUnavailable", "the server is shutting down")
        if "events" in self.forbidden:
            return self._status(403, "Forbidden", f"events is forbidden: User cannot {what} resource")
        return None

    async def _create_event(self, request: web.Request) -> web.Response:
        await self._wait_resumed()
        refused = self._event_refused("create")
        if refused is not None:
            return refused
        namespace = request.match_info["namespace"]
        if namespace in self.terminating:
            message = (f"events is forbidden: unable to create new content in namespace {namespace} "
                       "because it is being terminated")
            return web.json_response({
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
                "reason": "Forbidden", "code": 403, "details": {"kind": "events", "causes": [
                    {"reason": "NamespaceTerminating", "message": message, "field": "metadata.namespace"}]}},
                status=403)
        event = await request.json()
        meta = event.setdefault("metadata", {})
        if meta.setdefault("namespace", namespace) != namespace or not meta.get("name"):
            return self._status(400, "BadRequest", "the namespace of the object does not match the request")
        key = (namespace, meta["name"])
        if key in self.events:
            return self._status(409, "AlreadyExists", f'events "{meta["name"]}" already exists')
        self.rv += 1
        meta.update(resourceVersion=str(self.rv), uid=f"event-{self.rv}")
        self.events[key] = event
        return web.json_response(event, status=201)

    async def _get_event(self, request: web.Request) -> web.Response:
        await self._wait_resumed()
        refused = self._event_refused("get")
        if refused is not None:
            return refused
        event = self.events.get((request.match_info["namespace"], request.match_info["name"]))
        if event is None:
            return self._status(404, "NotFound", f'events "{request.match_info["name"]}" not found')
        return web.json_response(event)

    async def _patch_event(self, request: web.Request) -> web.Response:
        await self._wait_resumed()
        refused = self._event_refused("patch")
        if refused is not None:
            return refused
        if request.content_type != "application/merge-patch+json":
            return self._status(415, "UnsupportedMediaType", f"the body of the request was in an unknown "
                                                             f"format: {request.content_type}")
        key = (request.match_info["namespace"], request.match_info["name"])
        event = self.events.get(key)
        if event is None:
            return self._status(404, "NotFound", f'events "{key[1]}" not found')
        patch = await request.json()
        wanted = (patch.get("metadata") or {}).get("resourceVersion")
        if wanted is not None and wanted != event["metadata"]["resourceVersion"]:
            return self._status(409, "Conflict", "the object has been modified; please apply your changes "
                                                 "to the latest version and try again")
        self.rv += 1
        merged = _merge_patch(event, patch)
        merged["metadata"]["resourceVersion"] = str(self.rv)
        self.events[key] = merged
        return web.json_response(merged)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        await self._wait_resumed()
        group = request.match_info.get("group", "")
        plural = self._by_path.get((group, request.match_info["plural"]), "")
        resource = self.resources.get(plural)
        if resource is None or plural not in self.installed or \
                request.match_info.get("version", resource.version) != resource.version:
            return self._status(404, "NotFound", "the server could not find the requested resource")
        if plural in self.forbidden:
            return self._status(403, "Forbidden", f"{plural} is forbidden: User cannot list resource")
        watching = request.query.get("watch") in ("true", "1")
        self.requests.append((plural, "watch" if watching else "list"))
        if self.down:
            return self._status(503, "ServiceUnavailable", "the server is shutting down")
        if watching:
            return await self._watch(request, resource)
        if request.query.get("continue") and self.expire_continue > 0:
            self.expire_continue -= 1
            return self._status(410, "Expired", "The provided continue parameter is too old")
        delay = self.slow.get(plural, 0.0)
        if delay:
            await asyncio.sleep(delay)
        return self._list(request, resource)

    def _list(self, request: web.Request, resource: Resource) -> web.Response:
        # sorted once per version: a paginated list of 100,000 pods must not sort per page
        key = self._ids[resource]
        cached = self._sorted.get(key)
        if cached is None or cached[0] != self.rv:
            cached = self.rv, sorted(self.store[key].items())
            self._sorted[key] = cached
        items = cached[1]
        offset = int(request.query.get("continue") or 0)
        limit = int(request.query.get("limit") or 0) or len(items) or 1
        page = items[offset: offset + limit]
        out = []
        for _, obj in page:
            item = copy.deepcopy(obj)
            if not resource.group:  # the real server leaves these out of core list items
                item.pop("apiVersion", None)
                item.pop("kind", None)
            out.append(item)
        meta: dict[str, Any] = {"resourceVersion": str(self.rv)}
        if offset + limit < len(items):
            meta["continue"] = str(offset + limit)
        return web.json_response({"apiVersion": resource.api_version, "kind": f"{resource.kind}List",
                                  "metadata": meta, "items": out})

    async def _watch(self, request: web.Request, resource: Resource) -> web.StreamResponse:
        start = int(request.query.get("resourceVersion") or 0)
        timeout = float(request.query.get("timeoutSeconds") or 300)
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        if self.slow_watch:
            await asyncio.sleep(self.slow_watch)
        if self.empty_watches:
            return response

        async def send(event: str, obj: Any) -> None:
            await response.write(json.dumps({"type": event, "object": obj}).encode() + b"\n")

        gone = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": "too old resource version", "reason": "Expired", "code": 410}
        if start < self.compacted:
            await send("ERROR", gone)
            return response
        watch = _Watch(self._ids[resource])
        self._watches.add(watch)
        sent = start
        try:
            for rv, event, obj in list(self.log[self._ids[resource]]):
                if rv > sent:
                    await send(event, obj)
                    sent = rv
            loop = asyncio.get_running_loop()
            end = loop.time() + timeout
            while True:
                try:
                    rv, event, obj = await asyncio.wait_for(watch.queue.get(), max(0.0, end - loop.time()))
                except TimeoutError:
                    return response  # timeoutSeconds: the server ends the stream cleanly
                await self._wait_resumed()  # a hung server holds its events back
                if event == "GONE":
                    await send("ERROR", gone)
                    return response
                if event == "DROP":
                    if request.transport is not None:
                        request.transport.abort()
                    return response
                if event == "BOOKMARK":
                    await send("BOOKMARK", {"kind": resource.kind, "apiVersion": resource.api_version,
                                            "metadata": {"resourceVersion": str(rv)}})
                    continue
                if rv > sent:
                    await send(event, obj)
                    sent = rv
        except (ConnectionResetError, asyncio.CancelledError):
            return response
        finally:
            self._watches.discard(watch)


def _merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: objects merge key by key, null deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    merged = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = _merge_patch(merged.get(key), value)
    return merged


def main(argv: list[str]) -> None:
    """Serve a snapshot file (a JSON ``List``) on 127.0.0.1:PORT until killed; prints "ready"."""
    import time

    with open(argv[0], "rb") as fh:
        document = json.load(fh)
    server = FakeApiServer()
    server.preload([o for o in document["items"] if isinstance(o, dict)])
    del document
    server.fixed_port = int(argv[1])
    with server:
        print("ready", server.port, flush=True)
        while True:
            time.sleep(3600)


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
