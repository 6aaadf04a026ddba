#!/usr/bin/env python3
"""Misbehaving clients for tests/soak/soak.sh, until killed.

flood TARGET FILE: one ReadBlocks stream sending 1 MiB reads of FILE and never reading a response.
cancel TARGET FILE: unary and streamed reads of FILE with deadlines from 0 to 2 ms and streams
cancelled at random points; prints one line per 1,000 calls.
"""
import random
import sys
import threading
import time

import grpc

from blockread._proto.blockread.v1 import blockread_pb2 as pb
from blockread._proto.blockread.v1 import blockread_pb2_grpc as pb_grpc


def flood(stub, name, size):
    def requests():
        tag = 0
        while True:
            tag += 1
            offset = random.randrange(0, max(1, size - (1 << 20))) // 4096 * 4096
            yield pb.ReadBlocksRequest(reads=[pb.ReadItem(tag=tag, file=name, offset=offset,
                                                          length=1 << 20)])
    call = stub.ReadBlocks(requests())  # the responses are never read
    while call.is_active():  # holding `call` keeps the stream open
        time.sleep(1)
    print(f"misbehave flood: the stream ended: {call.code()}", flush=True)
    sys.exit(1)


def cancel(stub, name, size):
    calls = 0
    while True:
        offset = random.randrange(0, size // 4096) * 4096
        length = random.choice([4096, 65536, 1 << 20])
        length = min(length, size - offset)
        try:
            stub.ReadBlock(pb.ReadBlockRequest(file=name, offset=offset, length=length),
                           timeout=random.uniform(0, 0.002))
        except grpc.RpcError:
            pass
        stream = stub.ReadBlocks(iter([pb.ReadBlocksRequest(reads=[
            pb.ReadItem(tag=i, file=name, offset=offset, length=length) for i in range(8)])]))
        threading.Timer(random.uniform(0, 0.003), stream.cancel).start()
        try:
            for _ in stream:
                pass
        except grpc.RpcError:
            pass
        calls += 2
        if calls % 1000 == 0:
            print(f"misbehave cancel: {calls} calls", flush=True)


def main():
    mode, target, name = sys.argv[1:4]
    channel = grpc.insecure_channel(target, options=[("grpc.max_receive_message_length", 64 << 20)])
    stub = pb_grpc.BlockReadStub(channel)
    size = stub.StatFile(pb.StatFileRequest(file=name)).size
    {"flood": flood, "cancel": cancel}[mode](stub, name, size)


if __name__ == "__main__":
    main()
