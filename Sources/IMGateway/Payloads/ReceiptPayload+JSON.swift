extension ReceiptPayload: FixedShapePayload {
    /// The JSON, keys sorted, as ``PayloadCodec`` writes every payload.
    public func json() -> [UInt8] {
        var writer = PayloadJSONWriter(capacity: 64 + by.utf8.count + (device?.utf8.count ?? 0) + id.utf8.count * (1 + (ids?.count ?? 0)))
        writer.beginObject()
        writer.key("by")
        writer.string(by)
        if let device {
            writer.key("device")
            writer.string(device)
        }
        writer.key("id")
        writer.string(id)
        if let ids {
            writer.key("ids")
            writer.beginArray()
            for id in ids { writer.string(id) }
            writer.endArray()
        }
        writer.key("kind")
        writer.string(kind.rawValue)
        writer.key("ts")
        writer.number(ts)
        writer.endObject()
        return writer.bytes
    }

    /// Reads the usual shape directly; `nil` for anything else.
    public init?(fastJSON bytes: [UInt8]) {
        guard let payload = PayloadJSONReader.read(bytes, { reader -> ReceiptPayload? in
            var by: String?, device: String?, id: String?, ids: [String]?, kind: Kind?, ts: UInt64?
            let complete = reader.object { key, reader in
                switch key.count {
                case 2 where key.spells("by") && by == nil:
                    by = reader.string()
                    return by != nil
                case 6 where key.spells("device") && device == nil:
                    device = reader.string()
                    return device != nil
                case 2 where key.spells("id") && id == nil:
                    id = reader.string()
                    return id != nil
                case 3 where key.spells("ids") && ids == nil:
                    var list: [String] = []
                    guard reader.array({ reader in
                        guard let id = reader.string() else { return false }
                        list.append(id)
                        return true
                    }) else { return false }
                    ids = list
                    return true
                case 4 where key.spells("kind") && kind == nil:
                    kind = reader.string().flatMap(Kind.init(rawValue:))
                    return kind != nil
                case 2 where key.spells("ts") && ts == nil:
                    ts = reader.unsignedInteger()
                    return ts != nil
                default:
                    return false
                }
            }
            guard complete, let by, let id, let kind, let ts else { return nil }
            return ReceiptPayload(decoded: kind, id: id, ids: ids, by: by, device: device, ts: ts)
        }) else { return nil }
        self = payload
    }
}
