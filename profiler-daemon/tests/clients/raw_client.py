"""Sends bytes that are no protobuf message to a method of the daemon, as a
broken or hostile client would, and prints the status code it answers with.

Usage: raw_client.py SOCKET METHOD HEXBYTES
"""

import sys

import grpc


def main() -> None:
    socket, method, payload = sys.argv[1], sys.argv[2], bytes.fromhex(sys.argv[3])
    channel = grpc.insecure_channel(
        f"unix://{socket}", options=[("grpc.default_authority", "localhost")]
    )
    # Without serializers, grpcio sends the bytes as they are.
    call = channel.unary_unary(method)
    try:
        call(payload, timeout=10)
        print("OK")
    except grpc.RpcError as err:
        print(err.code().name, err.details())


if __name__ == "__main__":
    main()
