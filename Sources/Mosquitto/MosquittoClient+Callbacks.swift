import CMosquitto

// libmosquitto's callbacks: they run on the loop thread, inside loop_read/loop_write, and
// hand what they were given to the client (isolated: the loop is its executor).

extension MosquittoClient {
    /// Points the handle's callbacks at the client whose pointer it carries as userdata.
    static func setCallbacks(of mosq: OpaquePointer) {
        mosquitto_connect_v5_callback_set(mosq, onConnect)
        mosquitto_disconnect_v5_callback_set(mosq, onDisconnect)
        mosquitto_publish_v5_callback_set(mosq, onPublish)
        mosquitto_message_v5_callback_set(mosq, onMessage)
        mosquitto_subscribe_v5_callback_set(mosq, onSubscribe)
        mosquitto_unsubscribe_v5_callback_set(mosq, onUnsubscribe)
    }
}

/// The properties a received message carries, as the configuration asks.
private func receivedProperties(_ list: OpaquePointer?, _ configuration: MosquittoClient.Configuration) -> MQTTProperties {
    guard let list else { return MQTTProperties() }
    if configuration.receivesProperties { return MQTTProperties(copying: list) }
    if configuration.receivesCorrelationData { return MQTTProperties(correlationDataOf: list) }
    return MQTTProperties()
}

@inline(__always)
private func client(_ userdata: UnsafeMutableRawPointer?) -> MosquittoClient {
    Unmanaged<MosquittoClient>.fromOpaque(userdata!).takeUnretainedValue()
}

private let onConnect: @convention(c) (OpaquePointer?, UnsafeMutableRawPointer?, Int32, Int32, OpaquePointer?) -> Void = {
    _, userdata, rc, flags, properties in
    // Read here: the list lives only during the callback.
    let capabilities = BrokerCapabilities(connackProperties: properties)
    client(userdata).assumeIsolated { $0.handleConnack(rc, flags: flags, capabilities: capabilities) }
}

private let onDisconnect: @convention(c) (OpaquePointer?, UnsafeMutableRawPointer?, Int32, OpaquePointer?) -> Void = {
    _, userdata, rc, _ in
    client(userdata).assumeIsolated { $0.handleDisconnect(rc) }
}

private let onPublish: @convention(c) (OpaquePointer?, UnsafeMutableRawPointer?, Int32, Int32, OpaquePointer?) -> Void = {
    _, userdata, mid, reason, _ in
    client(userdata).assumeIsolated { $0.handlePublished(mid, reason: reason) }
}

private let onMessage: @convention(c) (OpaquePointer?, UnsafeMutableRawPointer?, UnsafePointer<mosquitto_message>?, OpaquePointer?) -> Void = {
    _, userdata, message, properties in
    guard let message else { return }
    // Copy everything now: libmosquitto frees the message and properties on return.
    let raw = message.pointee
    let receiver = client(userdata)
    let payload: [UInt8] = raw.payloadlen > 0 && raw.payload != nil
        ? Array(UnsafeRawBufferPointer(start: raw.payload, count: Int(raw.payloadlen))) : []
    let received = MosquittoMessage(
        topic: raw.topic.map { String(cString: $0) } ?? "",
        payload: payload,
        qos: QoS(rawValue: UInt8(clamping: raw.qos)) ?? .atMostOnce,
        retain: raw.retain,
        dup: MosquittoLibrary.dupFlag(of: message),
        properties: receivedProperties(properties, receiver.configuration))
    receiver.assumeIsolated { $0.handleMessage(received) }
}

private let onSubscribe: @convention(c) (OpaquePointer?, UnsafeMutableRawPointer?, Int32, Int32, UnsafePointer<Int32>?, OpaquePointer?) -> Void = {
    _, userdata, mid, count, granted, _ in
    let codes = (0..<Int(max(count, 0))).map { ReasonCode(UInt8(clamping: granted?[$0] ?? 0x80)) }
    client(userdata).assumeIsolated { $0.handleSubscribed(mid, codes: codes) }
}

private let onUnsubscribe: @convention(c) (OpaquePointer?, UnsafeMutableRawPointer?, Int32, OpaquePointer?) -> Void = {
    _, userdata, mid, _ in
    client(userdata).assumeIsolated { $0.handleUnsubscribed(mid) }
}


