extension ChatPayload: FixedShapePayload {
    /// The JSON, keys sorted, as ``PayloadCodec`` writes every payload.
    public func json() -> [UInt8] {
        var writer = PayloadJSONWriter(capacity: 96 + id.utf8.count + from.utf8.count + to.utf8.count
            + (text?.utf8.count ?? 0) + (data?.utf8.count ?? 0))
        writer.beginObject()
        if let carbon {
            writer.key("carbon")
            writer.bool(carbon)
        }
        if let data {
            writer.key("data")
            writer.string(data)
        }
        if let deleted {
            writer.key("deleted")
            writer.number(deleted)
        }
        if let epoch {
            writer.key("epoch")
            writer.number(epoch)
        }
        if let ext {
            writer.key("ext")
            writer.beginArray()
            for item in ext {
                writer.beginObject()
                writer.key("data")
                writer.string(item.data)
                writer.key("tag")
                writer.number(item.tag)
                writer.endObject()
            }
            writer.endArray()
        }
        writer.key("from")
        writer.string(from)
        if let group {
            writer.key("group")
            writer.string(group)
        }
        writer.key("id")
        writer.string(id)
        if let offset {
            writer.key("offset")
            writer.number(offset)
        }
        if let qos {
            writer.key("qos")
            writer.number(qos)
        }
        if let text {
            writer.key("text")
            writer.string(text)
        }
        writer.key("to")
        writer.string(to)
        writer.key("ts")
        writer.number(ts)
        writer.key("type")
        writer.string(type)
        writer.endObject()
        return writer.bytes
    }

    /// Reads the usual shape directly; `nil` for anything else.
    public init?(fastJSON bytes: [UInt8]) {
        guard let payload = PayloadJSONReader.read(bytes, { reader -> ChatPayload? in
            var id: String?, from: String?, to: String?, ts: UInt64?, type: String?
            var text: String?, data: String?, qos: Int?, ext: [Extension]?, group: String?, carbon: Bool?
            var offset: UInt64?, epoch: UInt64?, deleted: UInt64?
            let complete = reader.object { key, reader in
                // An unknown or repeated key ends the fast path: Foundation's decoder decides.
                if key.spells("id") { return PayloadJSONReader.fill(&id, with: reader.string()) }
                if key.spells("from") { return PayloadJSONReader.fill(&from, with: reader.string()) }
                if key.spells("to") { return PayloadJSONReader.fill(&to, with: reader.string()) }
                if key.spells("ts") { return PayloadJSONReader.fill(&ts, with: reader.unsignedInteger()) }
                if key.spells("type") { return PayloadJSONReader.fill(&type, with: reader.string()) }
                if key.spells("text") { return PayloadJSONReader.fill(&text, with: reader.string()) }
                if key.spells("data") { return PayloadJSONReader.fill(&data, with: reader.string()) }
                if key.spells("qos") { return PayloadJSONReader.fill(&qos, with: reader.integer()) }
                if key.spells("ext") { return PayloadJSONReader.fill(&ext, with: Self.readExtensions(&reader)) }
                if key.spells("group") { return PayloadJSONReader.fill(&group, with: reader.string()) }
                if key.spells("carbon") { return PayloadJSONReader.fill(&carbon, with: reader.bool()) }
                if key.spells("offset") { return PayloadJSONReader.fill(&offset, with: reader.unsignedInteger()) }
                if key.spells("epoch") { return PayloadJSONReader.fill(&epoch, with: reader.unsignedInteger()) }
                if key.spells("deleted") { return PayloadJSONReader.fill(&deleted, with: reader.unsignedInteger()) }
                return false
            }
            guard complete, let id, let from, let to, let ts, let type else { return nil }
            var payload = ChatPayload(
                id: id, from: from, to: to, ts: ts, type: type, text: text, data: data, qos: qos, ext: ext, group: group, carbon: carbon,
                offset: offset, epoch: epoch)
            payload.deleted = deleted
            return payload
        }) else { return nil }
        self = payload
    }

    private static func readExtensions(_ reader: inout PayloadJSONReader) -> [Extension]? {
        var items: [Extension] = []
        let complete = reader.array { reader in
            var tag: Int?, data: String?
            let complete = reader.object { key, reader in
                if key.spells("tag") { return PayloadJSONReader.fill(&tag, with: reader.integer()) }
                if key.spells("data") { return PayloadJSONReader.fill(&data, with: reader.string()) }
                return false
            }
            guard complete, let tag, let data else { return false }
            items.append(Extension(tag: tag, data: data))
            return true
        }
        return complete ? items : nil
    }
}
