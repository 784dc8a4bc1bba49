import NIOCore

extension IMWire {
    /// Allowed byte lengths of user and device ids.
    public static let identifierLength: ClosedRange<Int> = 1...128
    /// Allowed byte lengths of message ids.
    public static let messageIDLength: ClosedRange<Int> = 1...128
    /// Allowed byte lengths of auth tokens.
    public static let tokenLength: ClosedRange<Int> = 1...8192
    /// Allowed byte lengths of topics and topic filters.
    public static let topicLength: ClosedRange<Int> = 1...1024

    /// Whether `id` is a valid user or device id: 1–128 UTF-8 bytes without `/`, `+`, `#` or NUL,
    /// so that it can be one MQTT topic level.
    public static func isValidIdentifier(_ id: String) -> Bool {
        identifierLength.contains(id.utf8.count) && !id.utf8.contains { $0 == 0x2F || $0 == 0x2B || $0 == 0x23 || $0 == 0 }
    }
}

extension TLVItem {
    /// The value as a user or device id (see ``IMWire/isValidIdentifier(_:)``).
    public func identifier() throws(IMWireError) -> String {
        let id = try self.string(length: IMWire.identifierLength)
        guard IMWire.isValidIdentifier(id) else { throw .invalidField(self.tag, .invalidIdentifier(id)) }
        return id
    }

    /// The value as a QoS level.
    public func qos() throws(IMWireError) -> IMQoS {
        let raw = try self.integer(as: UInt8.self)
        guard let qos = IMQoS(rawValue: raw) else { throw .invalidField(self.tag, .valueOutOfRange(String(raw))) }
        return qos
    }
}

extension TLVFields {
    func identifier(_ tag: IMTag) throws(IMWireError) -> String {
        try self.required(tag).identifier()
    }

    func optionalIdentifier(_ tag: IMTag) throws(IMWireError) -> String? {
        guard let item = try self.optional(tag) else { return nil }
        return try item.identifier()
    }

    func string(_ tag: IMTag, length: ClosedRange<Int>) throws(IMWireError) -> String {
        try self.required(tag).string(length: length)
    }

    func optionalString(_ tag: IMTag) throws(IMWireError) -> String? {
        guard let item = try self.optional(tag) else { return nil }
        return try item.string()
    }

    func integer<T: FixedWidthInteger>(_ tag: IMTag, as type: T.Type = T.self) throws(IMWireError) -> T {
        try self.required(tag).integer(as: type)
    }

    func optionalInteger<T: FixedWidthInteger>(_ tag: IMTag, as type: T.Type = T.self) throws(IMWireError) -> T? {
        guard let item = try self.optional(tag) else { return nil }
        return try item.integer(as: type)
    }

    func flag(_ tag: IMTag) throws(IMWireError) -> Bool {
        try self.optionalFlag(tag) ?? false
    }

    func optionalFlag(_ tag: IMTag) throws(IMWireError) -> Bool? {
        guard let item = try self.optional(tag) else { return nil }
        return try item.flag()
    }

    func qos(_ tag: IMTag = .qos, default: IMQoS) throws(IMWireError) -> IMQoS {
        guard let item = try self.optional(tag) else { return `default` }
        return try item.qos()
    }

    /// The elements with `tag` of the top-level container (a non-empty list); other tags are ignored.
    func list(of tag: IMTag) throws(IMWireError) -> [TLVItem] {
        let elements = try self.required(.container).items().all(tag)
        guard !elements.isEmpty else { throw .missingField(tag) }
        return elements
    }

    /// The ids listed in the top-level container.
    func identifierList(of tag: IMTag = .userID) throws(IMWireError) -> [String] {
        var ids: [String] = []
        for item in try self.list(of: tag) { ids.append(try item.identifier()) }
        return ids
    }
}

extension TLVWriter {
    /// Writes a container holding one `tag` item per string.
    mutating func writeList(_ tag: IMTag, strings: [String]) {
        self.writeContainer { writer in
            for string in strings { writer.write(tag, string: string) }
        }
    }
}
