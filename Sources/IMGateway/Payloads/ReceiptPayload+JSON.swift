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
                if key.spells("by") { return PayloadJSONReader.fill(&by, with: reader.string()) }
                if key.spells("device") { return PayloadJSONReader.fill(&device, with: reader.string()) }
                if key.spells("id") { return PayloadJSONReader.fill(&id, with: reader.string()) }
                if key.spells("ids") { return PayloadJSONReader.fill(&ids, with: Self.readIDs(&reader)) }
                if key.spells("kind") { return PayloadJSONReader.fill(&kind, with: reader.string().flatMap(Kind.init(rawValue:))) }
                if key.spells("ts") { return PayloadJSONReader.fill(&ts, with: reader.unsignedInteger()) }
                return false
            }
            guard complete, let by, let id, let kind, let ts else { return nil }
            return ReceiptPayload(decoded: kind, id: id, ids: ids, by: by, device: device, ts: ts)
        }) else { return nil }
        self = payload
    }

    private static func readIDs(_ reader: inout PayloadJSONReader) -> [String]? {
        var ids: [String] = []
        let complete = reader.array { reader in
            guard let id = reader.string() else { return false }
            ids.append(id)
            return true
        }
        return complete ? ids : nil
    }
}
