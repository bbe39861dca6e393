"""Generated protobuf modules (scripts/gen_protos.py); see uamp_trio.grpc."""
