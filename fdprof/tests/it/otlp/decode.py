"""Decodes OTLP profiles requests with the official opentelemetry-proto package and prints
what the tests compare, as one JSON object: each sample type's total and, per process.pid,
each sample type's total; the resource's attributes; and whether every dictionary table
starts with its zero entry.

Usage: decode.py REQUEST.pb [REQUEST.pb ...]  (several requests are added up)
"""

import json
import sys

from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2


def value_of(v):
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


def main(paths):
    totals, by_pid, resource, zero_first, names = {}, {}, {}, True, {}
    for path in paths:
        req = profiles_service_pb2.ExportProfilesServiceRequest()
        with open(path, "rb") as f:
            req.ParseFromString(f.read())
        d = req.dictionary
        for table in ("mapping_table", "location_table", "function_table",
                      "attribute_table", "stack_table"):
            rows = getattr(d, table)
            zero_first &= len(rows) > 0 and rows[0].ByteSize() == 0
        zero_first &= len(d.string_table) > 0 and d.string_table[0] == ""
        s = d.string_table
        for rp in req.resource_profiles:
            for kv in rp.resource.attributes:
                resource[kv.key] = value_of(kv.value)
            for sp in rp.scope_profiles:
                for p in sp.profiles:
                    kind = s[p.sample_type.type_strindex] + "/" + s[p.sample_type.unit_strindex]
                    for sample in p.samples:
                        v = sum(sample.values)
                        totals[kind] = totals.get(kind, 0) + v
                        attrs = {}
                        for i in sample.attribute_indices:
                            a = d.attribute_table[i]
                            attrs[s[a.key_strindex]] = value_of(a.value)
                        pid = attrs.get("process.pid")
                        if pid is not None:
                            per = by_pid.setdefault(str(pid), {})
                            per[kind] = per.get(kind, 0) + v
                            name = attrs.get("process.executable.name")
                            if name:
                                names[str(pid)] = name
    print(json.dumps({"totals": totals, "by_pid": by_pid, "names": names,
                      "resource": resource, "zero_first": zero_first}))


if __name__ == "__main__":
    main(sys.argv[1:])
