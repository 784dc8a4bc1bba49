import CMosquitto

/// The MQTT v5 properties this library sends and receives on PUBLISH (and on a will).
///
/// User properties keep their order and may repeat a name, as MQTT allows.
public struct MQTTProperties: Sendable, Hashable {
    /// Name/value pairs (MQTT_PROP_USER_PROPERTY), in order.
    public var userProperties: [UserProperty]
    /// MIME type of the payload, e.g. `application/json`.
    public var contentType: String?
    /// Seconds after which the broker discards the message if undelivered.
    public var messageExpiryInterval: UInt32?
    /// Request/response: where to answer.
    public var responseTopic: String?
    /// Request/response: opaque correlation bytes.
    public var correlationData: [UInt8]?
    /// `true` when the payload is UTF-8 text (payload format indicator 1).
    public var payloadIsUTF8: Bool?

    public init(
        userProperties: [UserProperty] = [],
        contentType: String? = nil,
        messageExpiryInterval: UInt32? = nil,
        responseTopic: String? = nil,
        correlationData: [UInt8]? = nil,
        payloadIsUTF8: Bool? = nil
    ) {
        self.userProperties = userProperties
        self.contentType = contentType
        self.messageExpiryInterval = messageExpiryInterval
        self.responseTopic = responseTopic
        self.correlationData = correlationData
        self.payloadIsUTF8 = payloadIsUTF8
    }

    /// True when no property is set.
    public var isEmpty: Bool {
        userProperties.isEmpty && contentType == nil && messageExpiryInterval == nil
            && responseTopic == nil && correlationData == nil && payloadIsUTF8 == nil
    }

    /// The value of the first user property called `name`.
    public subscript(user name: String) -> String? {
        userProperties.first { $0.name == name }?.value
    }
}

/// One MQTT v5 user property.
public struct UserProperty: Sendable, Hashable {
    public var name: String
    public var value: String
    public init(_ name: String, _ value: String) {
        self.name = name
        self.value = value
    }
}

extension MQTTProperties {
    /// Builds a libmosquitto property list; the caller owns it (free with
    /// `mosquitto_property_free_all`). Returns nil when there is nothing to send.
    func makeList() throws(MosquittoError) -> OpaquePointer? {
        if isEmpty { return nil }
        var list: OpaquePointer? = nil
        do throws(MosquittoError) {
            if let payloadIsUTF8 {
                try mosquitto_property_add_byte(&list, Int32(MQTT_PROP_PAYLOAD_FORMAT_INDICATOR.rawValue), payloadIsUTF8 ? 1 : 0).check()
            }
            if let messageExpiryInterval {
                try mosquitto_property_add_int32(&list, Int32(MQTT_PROP_MESSAGE_EXPIRY_INTERVAL.rawValue), messageExpiryInterval).check()
            }
            if let contentType {
                try mosquitto_property_add_string(&list, Int32(MQTT_PROP_CONTENT_TYPE.rawValue), contentType).check()
            }
            if let responseTopic {
                try mosquitto_property_add_string(&list, Int32(MQTT_PROP_RESPONSE_TOPIC.rawValue), responseTopic).check()
            }
            if let correlationData {
                let rc = correlationData.withUnsafeBytes { raw in
                    mosquitto_property_add_binary(
                        &list, Int32(MQTT_PROP_CORRELATION_DATA.rawValue), raw.baseAddress, UInt16(clamping: raw.count))
                }
                try rc.check()
            }
            for property in userProperties {
                try mosquitto_property_add_string_pair(
                    &list, Int32(MQTT_PROP_USER_PROPERTY.rawValue), property.name, property.value
                ).check()
            }
        } catch {
            mosquitto_property_free_all(&list)
            throw error
        }
        return list
    }

    /// Only the correlation data of `list` (one copy; the rest is left alone).
    init(correlationDataOf list: OpaquePointer?) {
        self.init()
        let identifier = Int32(MQTT_PROP_CORRELATION_DATA.rawValue)
        var value: UnsafeMutableRawPointer? = nil
        var length: UInt16 = 0
        if mosquitto_property_read_binary(list, identifier, &value, &length, false) != nil {
            correlationData = value.map { Array(UnsafeRawBufferPointer(start: $0, count: Int(length))) } ?? []
        }
        free(value)
    }

    /// Copies what we expose from a libmosquitto property list (which the library frees
    /// after the callback returns).
    init(copying list: OpaquePointer?) {
        self.init()
        var property = list
        while let current = property {
            let identifier = mosquitto_property_identifier(current)
            switch identifier {
            case Int32(MQTT_PROP_USER_PROPERTY.rawValue):
                var name: UnsafeMutablePointer<CChar>? = nil
                var value: UnsafeMutablePointer<CChar>? = nil
                if mosquitto_property_read_string_pair(current, identifier, &name, &value, false) != nil {
                    userProperties.append(UserProperty(name.map { String(cString: $0) } ?? "", value.map { String(cString: $0) } ?? ""))
                }
                free(name)
                free(value)
            case Int32(MQTT_PROP_CONTENT_TYPE.rawValue), Int32(MQTT_PROP_RESPONSE_TOPIC.rawValue):
                var value: UnsafeMutablePointer<CChar>? = nil
                if mosquitto_property_read_string(current, identifier, &value, false) != nil, let value {
                    if identifier == Int32(MQTT_PROP_CONTENT_TYPE.rawValue) {
                        contentType = String(cString: value)
                    } else {
                        responseTopic = String(cString: value)
                    }
                }
                free(value)
            case Int32(MQTT_PROP_MESSAGE_EXPIRY_INTERVAL.rawValue):
                var value: UInt32 = 0
                if mosquitto_property_read_int32(current, identifier, &value, false) != nil {
                    messageExpiryInterval = value
                }
            case Int32(MQTT_PROP_PAYLOAD_FORMAT_INDICATOR.rawValue):
                var value: UInt8 = 0
                if mosquitto_property_read_byte(current, identifier, &value, false) != nil {
                    payloadIsUTF8 = value == 1
                }
            case Int32(MQTT_PROP_CORRELATION_DATA.rawValue):
                var value: UnsafeMutableRawPointer? = nil
                var length: UInt16 = 0
                if mosquitto_property_read_binary(current, identifier, &value, &length, false) != nil {
                    correlationData = value.map { Array(UnsafeRawBufferPointer(start: $0, count: Int(length))) } ?? []
                }
                free(value)
            default:
                break
            }
            property = mosquitto_property_next(current)
        }
    }
}
