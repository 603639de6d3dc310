"""One client of tools/bench/python/run.sh: N calls of process.Process on
a conch serve over gRPC (h2c), from one asyncio loop, CONC in flight; prints
one JSON line with this process's CPU time for the N calls and its peak
RSS.

    py_bench.py conch|grpcio HOST:PORT N CONC unary|stream [GEN_DIR]

unary: List (a unary RPC).  stream: Start of /bin/true read to its end
event, the shape of run("true").  grpcio uses the generic
unary_unary/unary_stream with the messages of GEN_DIR/process/process_pb2.py
(protoc --python_out)."""

import asyncio
import json
import resource
import sys
import time


def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


async def drive(call, n, conc):
    sem = asyncio.Semaphore(conc)

    async def one():
        async with sem:
            await call()
    await asyncio.gather(*(one() for _ in range(n)))


async def conch_client(addr, n, conc, shape):
    import conch
    async with conch.AsyncSandbox(f"http://{addr}", protocol="grpc",
                                  request_timeout=600) as sb:
        if shape == "unary":
            async def call():
                await sb.commands.list()
        else:
            async def call():
                r = await sb.commands.run(["/bin/true"])
                assert r.exit_code == 0
        await drive(call, 200, conc)
        c0, t0 = cpu(), time.monotonic()
        await drive(call, n, conc)
        return cpu() - c0, time.monotonic() - t0


async def grpcio_client(addr, n, conc, shape, gen):
    sys.path.insert(0, gen)
    import grpc
    from process import process_pb2 as pb
    async with grpc.aio.insecure_channel(addr) as ch:
        if shape == "unary":
            m = ch.unary_unary("/process.Process/List",
                               request_serializer=pb.ListRequest.SerializeToString,
                               response_deserializer=pb.ListResponse.FromString)

            async def call():
                await m(pb.ListRequest(), timeout=60)
        else:
            m = ch.unary_stream("/process.Process/Start",
                                request_serializer=pb.StartRequest.SerializeToString,
                                response_deserializer=pb.StartResponse.FromString)
            req = pb.StartRequest(process=pb.ProcessConfig(cmd="/bin/true"),
                                  stdin=False)

            async def call():
                ended = False
                async for resp in m(req, timeout=60):
                    if resp.event.HasField("end"):
                        ended = resp.event.end.exit_code == 0
                assert ended
        await drive(call, 200, conc)
        c0, t0 = cpu(), time.monotonic()
        await drive(call, n, conc)
        return cpu() - c0, time.monotonic() - t0


def main():
    lib, addr, n, conc, shape = sys.argv[1:6]
    n, conc = int(n), int(conc)
    if lib == "conch":
        used, wall = asyncio.run(conch_client(addr, n, conc, shape))
    else:
        used, wall = asyncio.run(grpcio_client(addr, n, conc, shape,
                                               sys.argv[6]))
    print(json.dumps({
        "lib": lib, "shape": shape, "n": n, "conc": conc,
        "cpu_us_per_call": used / n * 1e6, "wall_s": wall,
        "maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))


if __name__ == "__main__":
    main()
