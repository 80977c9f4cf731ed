"""An OTLP/HTTP trace receiver for the tests: decodes each export with the OpenTelemetry
project's published protobuf definitions (the opentelemetry-proto package) and writes every
span as one JSON line to stdout.

It prints `listening PORT` first. `--refuse N` answers the first N exports with 503, for the
tests of a collector that fails.
"""

import argparse
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from google.protobuf.json_format import MessageToDict
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


def value(any_value):
    """The Python value of an OTLP AnyValue."""
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return [value(item) for item in any_value.array_value.values]
    return None if kind is None else getattr(any_value, kind)


class Receiver(BaseHTTPRequestHandler):
    refuse = 0

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.path != "/v1/traces" or self.headers.get("Content-Type") != "application/x-protobuf":
            self.send_error(404)
            return
        if Receiver.refuse > 0:
            Receiver.refuse -= 1
            self.send_error(503)
            return
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        for resource_spans in request.resource_spans:
            resource = {a.key: value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    line = {
                        "trace_id": span.trace_id.hex(),
                        "span_id": span.span_id.hex(),
                        "parent_span_id": span.parent_span_id.hex(),
                        "name": span.name,
                        "start": span.start_time_unix_nano,
                        "end": span.end_time_unix_nano,
                        "attributes": {a.key: value(a.value) for a in span.attributes},
                        "status": MessageToDict(span.status),
                        "scope": scope_spans.scope.name,
                        "resource": resource,
                        "header": self.headers.get("x-test-header"),
                    }
                    sys.stdout.write(json.dumps(line) + "\n")
        sys.stdout.flush()
        reply = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args):
        pass


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--refuse", type=int, default=0)
    args = parser.parse_args()
    Receiver.refuse = args.refuse
    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    print(f"listening {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
