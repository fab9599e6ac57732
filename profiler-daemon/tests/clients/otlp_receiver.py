"""An OTLP profiles receiver for the tests: serves
opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export
with the generated classes of PyPI's opentelemetry-proto (not profilerd's),
and writes each request it takes, as JSON, one line each, to a file.

Usage: otlp_receiver.py PORT OUTPUT [CERT KEY]  (with CERT and KEY: over TLS)
"""

import sys
from concurrent import futures

import grpc
from google.protobuf.json_format import MessageToJson
from opentelemetry.proto.collector.profiles.v1development import (
    profiles_service_pb2,
    profiles_service_pb2_grpc,
)


class Receiver(profiles_service_pb2_grpc.ProfilesServiceServicer):
    def __init__(self, output):
        self.output = output

    def Export(self, request, context):
        metadata = dict(context.invocation_metadata())
        line = MessageToJson(request, indent=None)
        with open(self.output, "a", encoding="utf-8") as out:
            out.write('{"metadata": %s, "request": %s}\n' % (
                __import__("json").dumps(metadata), line))
        return profiles_service_pb2.ExportProfilesServiceResponse()


def main():
    port, output = sys.argv[1], sys.argv[2]
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    profiles_service_pb2_grpc.add_ProfilesServiceServicer_to_server(Receiver(output), server)
    if len(sys.argv) > 4:
        with open(sys.argv[3], "rb") as cert, open(sys.argv[4], "rb") as key:
            credentials = grpc.ssl_server_credentials([(key.read(), cert.read())])
        server.add_secure_port("127.0.0.1:" + port, credentials)
    else:
        server.add_insecure_port("127.0.0.1:" + port)
    server.start()
    print("ready", flush=True)
    server.wait_for_termination()


if __name__ == "__main__":
    main()
