"""An OTLP profiles receiver made of the official packages: grpcio serving the
ProfilesService of opentelemetry-proto, or a plain HTTP server for http/protobuf. Each request
it takes is decoded with opentelemetry-proto (a request that does not decode is answered as an
error) and saved as DIR/NNNNNN.pb, for decode.py.

For its first --refuse-for seconds, and its first --refuse-first requests, it refuses every
request: gRPC UNAVAILABLE, or HTTP 503 with Retry-After: 1. It counts what it refused in
DIR/refused.

Usage: receiver.py --protocol grpc|http --dir DIR --port-file FILE [--refuse-for SECONDS]
       [--refuse-first N]
It binds 127.0.0.1 on a port of the kernel's choosing and writes it to FILE.
"""

import argparse
import http.server
import os
import threading
import time
from concurrent import futures

import grpc
from opentelemetry.proto.collector.profiles.v1development import (
    profiles_service_pb2 as pb,
    profiles_service_pb2_grpc as pb_grpc,
)


class Store:
    def __init__(self, directory, refuse_for, refuse_first):
        self.dir = directory
        self.until = time.monotonic() + refuse_for
        self.refuse_first = refuse_first
        self.lock = threading.Lock()
        self.taken = 0
        self.refused = 0

    def refusing(self):
        with self.lock:
            if time.monotonic() < self.until or self.refused < self.refuse_first:
                self.refused += 1
                with open(os.path.join(self.dir, "refused"), "w") as f:
                    f.write(str(self.refused))
                return True
            return False

    def keep(self, data):
        pb.ExportProfilesServiceRequest.FromString(data)  # raises if it does not decode
        with self.lock:
            self.taken += 1
            name = os.path.join(self.dir, "%06d.pb" % self.taken)
        with open(name + ".part", "wb") as f:
            f.write(data)
        os.rename(name + ".part", name)


class Service(pb_grpc.ProfilesServiceServicer):
    def __init__(self, store):
        self.store = store

    def Export(self, request, context):
        if self.store.refusing():
            context.abort(grpc.StatusCode.UNAVAILABLE, "starting up")
        self.store.keep(request.SerializeToString())
        return pb.ExportProfilesServiceResponse()


def http_handler(store):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):
            if self.path != "/v1development/profiles":
                self.send_error(404)
                return
            body = self.rfile.read(int(self.headers["Content-Length"]))
            if self.headers.get("Content-Type") != "application/x-protobuf":
                self.send_error(415)
                return
            if store.refusing():
                self.send_response(503)
                self.send_header("Retry-After", "1")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            try:
                store.keep(body)
            except Exception:
                self.send_error(400)
                return
            answer = pb.ExportProfilesServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args):
            pass

    return Handler


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--protocol", choices=["grpc", "http"], required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--refuse-for", type=float, default=0)
    ap.add_argument("--refuse-first", type=int, default=0)
    args = ap.parse_args()
    store = Store(args.dir, args.refuse_for, args.refuse_first)
    if args.protocol == "grpc":
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        pb_grpc.add_ProfilesServiceServicer_to_server(Service(store), server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        wait = server.wait_for_termination
    else:
        httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http_handler(store))
        port = httpd.server_address[1]
        wait = httpd.serve_forever
    with open(args.port_file + ".part", "w") as f:
        f.write(str(port))
    os.rename(args.port_file + ".part", args.port_file)
    wait()


if __name__ == "__main__":
    main()
