"""A client no one in this project wrote: Python's grpcio, which learns the
API by server reflection alone (no .proto files, no generated code).

Usage: reflection_client.py SOCKET PID OUTPUT

Lists the services, checks health, profiles PID for one second as pprof
and writes the report to OUTPUT. Prints what it found, one fact per line.
"""

import sys

import grpc
from google.protobuf import message_factory
from google.protobuf.descriptor_pool import DescriptorPool
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)


def main() -> None:
    socket, pid, output = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    # grpcio sends the socket's path as :authority, which HTTP/2 servers
    # (the daemon's among them) refuse: name the host as every Unix-socket
    # gRPC client does.
    channel = grpc.insecure_channel(
        f"unix://{socket}", options=[("grpc.default_authority", "localhost")]
    )

    database = ProtoReflectionDescriptorDatabase(channel)
    print("services:", " ".join(sorted(database.get_services())))

    health = health_pb2_grpc.HealthStub(channel).Check(
        health_pb2.HealthCheckRequest(service="profilerd.v1.Profiler"), timeout=10
    )
    print("health:", health_pb2.HealthCheckResponse.ServingStatus.Name(health.status))

    pool = DescriptorPool(database)
    method = pool.FindServiceByName("profilerd.v1.Profiler").methods_by_name["Profile"]
    request_class = message_factory.GetMessageClass(method.input_type)
    reply_class = message_factory.GetMessageClass(method.output_type)
    pprof = pool.FindEnumTypeByName("profilerd.v1.Format").values_by_name["FORMAT_PPROF"]

    request = request_class()
    request.duration_ms = 1000
    request.selector.pids.append(pid)
    request.options.format = pprof.number
    profile = channel.unary_unary(
        "/profilerd.v1.Profiler/Profile",
        request_serializer=request_class.SerializeToString,
        response_deserializer=reply_class.FromString,
    )
    reply = profile(request, timeout=30)
    with open(output, "wb") as file:
        file.write(reply.report)
    print("report bytes:", len(reply.report))
    print("samples:", reply.summary.samples)


if __name__ == "__main__":
    main()
