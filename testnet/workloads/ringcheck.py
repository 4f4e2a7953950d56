#!/usr/bin/env python3
"""ringcheck: a stdlib-only stand-in for a distributed training job.

It needs from the network what torchrun and gloo need, and uses the
contract a gpumesh cluster member's job gets (RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT, GPUMESH_CLUSTER_ADDRS, GLOO_SOCKET_IFNAME,
CHECKPOINT_DIR, JOB_ATTEMPT):

- rank 0 serves a small key-value store on MASTER_PORT (as torch's
  TCPStore does);
- every rank listens on a kernel-chosen port on its own cluster address
  and publishes it in the store (as gloo does);
- the ranks make a full mesh, the one with the larger address:port
  connecting to the other (gloo's rule);
- then, step after step, a ring all-reduce (XOR) of a block of --mib MiB,
  checked against the XOR every rank can compute, and a small-message
  round trip between ranks 0 and 1;
- rank 0 keeps the step in $CHECKPOINT_DIR/step every --checkpoint-every
  steps; every rank of a later attempt starts from the step there.

Rank 0 prints one JSON line at the end: the all-reduce's bus bandwidth
(2(n-1)/n * bytes / seconds, as nccl-tests reports it), the round trip,
and the steps done; every rank prints where its attempt started.
"""

import argparse
import hashlib
import json
import os
import socket
import struct
import sys
import threading
import time


def env(name, default=None):
    v = os.environ.get(name, default)
    if v is None:
        sys.exit(f"ringcheck: {name} is not set: run me as a gpumesh cluster job (gpumesh run --nodes N)")
    return v


def recv_exact(s, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise ConnectionError("peer closed the connection")
        buf += chunk
    return bytes(buf)


def send_msg(s, data):
    s.sendall(struct.pack(">I", len(data)) + data)


def recv_msg(s):
    (n,) = struct.unpack(">I", recv_exact(s, 4))
    return recv_exact(s, n)


class Store:
    """Rank 0's key-value store: SET k v / GET k (waits for k) / PING."""

    def __init__(self, addr, port):
        self.data, self.cond = {}, threading.Condition()
        self.srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.srv.bind((addr, port))
        self.srv.listen(64)
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        while True:
            c, _ = self.srv.accept()
            threading.Thread(target=self.client, args=(c,), daemon=True).start()

    def client(self, c):
        try:
            while True:
                req = recv_msg(c).decode()
                op, _, rest = req.partition(" ")
                if op == "PING":
                    send_msg(c, b"PONG")
                elif op == "SET":
                    k, _, v = rest.partition(" ")
                    with self.cond:
                        self.data[k] = v
                        self.cond.notify_all()
                    send_msg(c, b"OK")
                elif op == "GET":
                    with self.cond:
                        self.cond.wait_for(lambda: rest in self.data)
                        v = self.data[rest]
                    send_msg(c, v.encode())
        except (ConnectionError, OSError):
            c.close()


class StoreClient:
    def __init__(self, addr, port, timeout):
        deadline = time.monotonic() + timeout
        while True:
            # A connect to another member's address always reaches this
            # node's cluster proxy; until the master listens, the proxy
            # closes the connection, which the ping finds.
            try:
                s = socket.create_connection((addr, port), timeout=10)
                send_msg(s, b"PING")
                if recv_msg(s) == b"PONG":
                    s.settimeout(None)
                    self.s = s
                    return
            except (ConnectionError, OSError, struct.error):
                pass
            if time.monotonic() > deadline:
                sys.exit(f"ringcheck: no store at {addr}:{port} after {timeout}s")
            time.sleep(0.2)

    def set(self, k, v):
        send_msg(self.s, f"SET {k} {v}".encode())
        recv_msg(self.s)

    def get(self, k):
        send_msg(self.s, f"GET {k}".encode())
        return recv_msg(self.s).decode()


def block(rank, step, size):
    """The deterministic block rank contributes at step."""
    seed = hashlib.sha256(f"{rank}/{step}".encode()).digest()
    return (seed * (size // len(seed) + 1))[:size]


def xor(a, b):
    return (int.from_bytes(a, "little") ^ int.from_bytes(b, "little")).to_bytes(len(a), "little")


def ring_allreduce(data, rank, n, right, left):
    """XOR all-reduce of data over the ring (reduce-scatter, all-gather)."""
    size = len(data)
    bounds = [size * i // n for i in range(n + 1)]
    chunks = [data[bounds[i]:bounds[i + 1]] for i in range(n)]

    def exchange(out):
        err = []

        def send():
            try:
                send_msg(right, out)
            except OSError as e:
                err.append(e)

        t = threading.Thread(target=send)
        t.start()
        got = recv_msg(left)
        t.join()
        if err:
            raise err[0]
        return got

    for k in range(n - 1):
        send_i, recv_i = (rank - k) % n, (rank - k - 1) % n
        chunks[recv_i] = xor(chunks[recv_i], exchange(chunks[send_i]))
    for k in range(n - 1):
        send_i, recv_i = (rank - k + 1) % n, (rank - k) % n
        chunks[recv_i] = exchange(chunks[send_i])
    return b"".join(chunks)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=float, default=4)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--step-sleep", type=float, default=0)
    ap.add_argument("--checkpoint-every", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--pings", type=int, default=10, help="small-message round trips between ranks 0 and 1 per step")
    ap.add_argument("--no-member-check", action="store_true", help="skip the check that a non-member address is refused")
    a = ap.parse_args()

    rank, n = int(env("RANK")), int(env("WORLD_SIZE"))
    addrs = env("GPUMESH_CLUSTER_ADDRS").split(",")
    me = addrs[rank]
    master, mport = env("MASTER_ADDR"), int(env("MASTER_PORT"))
    attempt = env("JOB_ATTEMPT", "1")
    ckdir = env("CHECKPOINT_DIR", "")
    step0 = 0
    if ckdir and os.path.exists(os.path.join(ckdir, "step")):
        step0 = int(open(os.path.join(ckdir, "step")).read().strip() or 0)
    print(f"attempt {attempt} rank {rank} of {n} on {socket.gethostname()} ({me}, {os.environ.get('GLOO_SOCKET_IFNAME', '-')}) starts at step {step0}", flush=True)

    if rank == 0:
        Store(me, mport)
    store = StoreClient(master, mport, a.timeout)

    # Listen on a kernel-chosen port of the own cluster address, as gloo.
    lst = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    lst.bind((me, 0))
    lst.listen(n)
    port = lst.getsockname()[1]
    store.set(f"addr/{attempt}/{rank}", f"{me}:{port}")
    peers = {}
    for r in range(n):
        if r != rank:
            host, p = store.get(f"addr/{attempt}/{r}").rsplit(":", 1)
            peers[r] = (host, int(p))

    # Full mesh: the larger address:port connects to the smaller.
    def key(r):
        h, p = (me, port) if r == rank else peers[r]
        return (socket.inet_aton(h), p)

    conns = {}
    expect = [r for r in peers if key(r) > key(rank)]
    for r in peers:
        if key(rank) > key(r):
            deadline = time.monotonic() + a.timeout
            while True:
                try:
                    s = socket.create_connection(peers[r], timeout=10)
                    send_msg(s, str(rank).encode())
                    if recv_msg(s) == b"ok":
                        break
                except (ConnectionError, OSError, struct.error):
                    if time.monotonic() > deadline:
                        sys.exit(f"ringcheck: rank {rank} cannot reach rank {r} at {peers[r]}")
                    time.sleep(0.2)
            s.settimeout(None)
            conns[r] = s
    for _ in expect:
        s, _ = lst.accept()
        r = int(recv_msg(s).decode())
        send_msg(s, b"ok")
        conns[r] = s
    for s in conns.values():
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    if rank == 0 and not a.no_member_check:
        # A cluster address of no member leads nowhere.
        try:
            s = socket.create_connection(("100.64.0.200", 9), timeout=5)
            s.settimeout(5)
            send_msg(s, b"PING")
            if s.recv(1):
                sys.exit("ringcheck: a non-member address answered")
        except (ConnectionError, OSError):
            pass

    size = int(a.mib * (1 << 20))
    right, left = conns.get((rank + 1) % n), conns.get((rank - 1) % n)
    seconds, rtts = 0.0, []
    step = step0
    while step < a.steps:
        data = block(rank, step, size)
        t0 = time.perf_counter()
        got = ring_allreduce(data, rank, n, right, left)
        seconds += time.perf_counter() - t0
        want = block(0, step, size)
        for r in range(1, n):
            want = xor(want, block(r, step, size))
        if got != want:
            sys.exit(f"ringcheck: all-reduce of step {step} is wrong on rank {rank}")
        # Small-message round trips between ranks 0 and 1: the first
        # waits for the slower rank to finish its check, the others are
        # the network's.
        for i in range(a.pings + 1):
            if rank == 0:
                t0 = time.perf_counter()
                send_msg(conns[1], b"x" * 8)
                recv_msg(conns[1])
                if i:
                    rtts.append(time.perf_counter() - t0)
            elif rank == 1:
                send_msg(conns[0], recv_msg(conns[0]))
        step += 1
        if rank == 0:
            digest = hashlib.sha256(got).hexdigest()[:16]
            print(f"step {step} all-reduce ok ({digest})", flush=True)
            if ckdir and step % a.checkpoint_every == 0:
                tmp = os.path.join(ckdir, "step.tmp")
                with open(tmp, "w") as f:
                    f.write(str(step))
                os.replace(tmp, os.path.join(ckdir, "step"))
        if a.step_sleep:
            time.sleep(a.step_sleep)
    done = step - step0
    if rank == 0:
        rtts.sort()
        out = {
            "ranks": n, "bytes": size, "steps": done, "attempt": int(attempt), "started_at_step": step0,
            "busbw_MBps": round(2 * (n - 1) / n * size * done / seconds / 1e6, 2) if seconds else 0,
            "rtt_ms": round(rtts[len(rtts) // 2] * 1000, 3) if rtts else 0,
        }
        print("ringcheck " + json.dumps(out), flush=True)
    # Leave together: a rank that closed first would look like a lost peer.
    store.set(f"done/{attempt}/{rank}", "1")
    for r in range(n):
        store.get(f"done/{attempt}/{r}")
    if rank == 0:
        time.sleep(0.5)  # the others read the last key before the store goes


if __name__ == "__main__":
    main()
