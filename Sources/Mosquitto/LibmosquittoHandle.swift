import CMosquitto

#if canImport(Glibc)
import Glibc
#endif

/// A libmosquitto handle as the client uses it: the C calls, each with its result checked
/// and its errors said in ``MosquittoError``; no state of its own. Built around
/// ``ClientIO/mosq`` for a call (the loop owns the handle's life and descriptors).
struct LibmosquittoHandle: @unchecked Sendable {
    // @unchecked Sendable: only for the trip to the connector queue. While the connector
    // uses the handle, `ClientIO.ownedByConnector` keeps the loop (and every client method,
    // which checks `state == .connecting`) away from it, and libmosquitto guards its own
    // shared fields with mutexes. Every other call is made on the loop thread.
    let raw: OpaquePointer

    init(_ raw: OpaquePointer) {
        self.raw = raw
    }

    /// Applies options, credentials, TLS and will to a fresh handle.
    func configure(_ configuration: MosquittoClient.Configuration) throws {
        let mosq = raw
        // Packets are only queued by calls; the loop writes them (and can hold them).
        try mosquitto_threaded_set(mosq, true).check()
        try mosquitto_int_option(mosq, MOSQ_OPT_PROTOCOL_VERSION, configuration.protocolVersion.rawValue).check()
        try mosquitto_int_option(mosq, MOSQ_OPT_TCP_NODELAY, 1).check()
        if configuration.protocolVersion == .v5 {
            try mosquitto_int_option(mosq, MOSQ_OPT_RECEIVE_MAXIMUM, Int32(configuration.advertisedReceiveMaximum)).check()
        }
        if configuration.username != nil || configuration.password != nil {
            try mosquitto_username_pw_set(mosq, configuration.username, configuration.password).check()
        }
        if let tls = configuration.tls {
            let rc = mosquitto_tls_set(mosq, tls.caFile, tls.caPath, tls.certFile, tls.keyFile, nil)
            if rc == Int32(MOSQ_ERR_INVAL.rawValue) {
                throw MosquittoError.invalidArgument("TLS files (CA \(tls.caFile ?? tls.caPath ?? "none"), cert \(tls.certFile ?? "none"), key \(tls.keyFile ?? "none")): missing or unreadable")
            }
            try rc.check()
            try mosquitto_tls_insecure_set(mosq, tls.insecure).check()
        }
        if let will = configuration.will {
            if configuration.protocolVersion != .v5 && !will.properties.isEmpty {
                throw MosquittoError.invalidArgument("will properties need MQTT v5")
            }
            var list = try will.properties.makeList()
            let rc = will.payload.withUnsafeBytes { bytes in
                mosquitto_will_set_v5(mosq, will.topic, Int32(bytes.count), bytes.baseAddress, Int32(will.qos.rawValue), will.retain, list)
            }
            if rc != Int32(MOSQ_ERR_SUCCESS.rawValue) {
                // On success libmosquitto owns the list; on failure we free it.
                if list != nil { mosquitto_property_free_all(&list) }
                throw rc == Int32(MOSQ_ERR_INVAL.rawValue) ? MosquittoError.invalidArgument("will topic \"\(will.topic)\"") : MosquittoError.code(rc)
            }
        }
    }

    /// Runs on the connector queue: name resolution and the non-blocking TCP connect
    /// (plus the TLS setup) happen here, never on the loop thread.
    func startConnect(_ configuration: MosquittoClient.Configuration) -> Int32 {
        let mosq = raw
        if configuration.protocolVersion == .v5 {
            // The CONNECT built below advertises this value (a previous connect left
            // libmosquitto's own limit raised, see `MosquittoLibrary.liftReceiveMaximum`).
            let rc = mosquitto_int_option(mosq, MOSQ_OPT_RECEIVE_MAXIMUM, Int32(configuration.advertisedReceiveMaximum))
            if rc != Int32(MOSQ_ERR_SUCCESS.rawValue) { return rc }
        }
        let rc = connectAsync(configuration)
        // libmosquitto 2.0 opens its socket without close-on-exec: mark it before a
        // child process can inherit it (a spawner that closes every descriptor in the
        // child covers the moment in between).
        let socket = mosquitto_socket(mosq)
        if socket >= 0 { _ = cmosq_set_cloexec(socket) }
        if rc == Int32(MOSQ_ERR_SUCCESS.rawValue) && configuration.protocolVersion == .v5 {
            // Lets libmosquitto accept more unacknowledged QoS 1/2 messages than the receive
            // maximum the CONNECT just built advertises (when its internals allow).
            MosquittoLibrary.liftReceiveMaximum(mosq)
        }
        return rc
    }

    /// The connect proper (name resolution, non-blocking TCP connect, CONNECT queued).
    private func connectAsync(_ configuration: MosquittoClient.Configuration) -> Int32 {
        let mosq = raw
        if configuration.protocolVersion == .v5 && configuration.sessionExpiryInterval > 0 {
            var list: OpaquePointer? = nil
            let added = mosquitto_property_add_int32(&list, Int32(MQTT_PROP_SESSION_EXPIRY_INTERVAL.rawValue), configuration.sessionExpiryInterval)
            if added != Int32(MOSQ_ERR_SUCCESS.rawValue) { return added }
            return MosquittoLibrary.connect(
                mosq, host: configuration.host, port: Int32(configuration.port), keepalive: Int32(configuration.keepalive), properties: &list)
        }
        return mosquitto_connect_bind_async(mosq, configuration.host, Int32(configuration.port), Int32(configuration.keepalive), nil)
    }

    /// Queues PUBLISH; returns its message id. Takes `properties` (a list from
    /// `MQTTProperties.makeList()`, or nil) and frees it.
    func publish(topic: String, payload: [UInt8], qos: QoS, retain: Bool, properties: OpaquePointer?) throws -> Int32 {
        var list = properties
        defer { if list != nil { mosquitto_property_free_all(&list) } }
        var mid: Int32 = 0
        let rc = payload.withUnsafeBytes { bytes in
            mosquitto_publish_v5(raw, &mid, topic, Int32(bytes.count), bytes.baseAddress, Int32(qos.rawValue), retain, list)
        }
        guard rc == Int32(MOSQ_ERR_SUCCESS.rawValue) else { throw Self.publishError(rc, topic: topic) }
        return mid
    }

    private static func publishError(_ rc: Int32, topic: String) -> MosquittoError {
        switch rc {
        case Int32(MOSQ_ERR_INVAL.rawValue): return .invalidArgument("topic \"\(topic)\" or QoS")
        case Int32(MOSQ_ERR_PAYLOAD_SIZE.rawValue), Int32(MOSQ_ERR_OVERSIZE_PACKET.rawValue):
            return .invalidArgument("payload too large for \"\(topic)\"")
        case Int32(MOSQ_ERR_MALFORMED_UTF8.rawValue): return .invalidArgument("topic is not valid UTF-8")
        case Int32(MOSQ_ERR_NO_CONN.rawValue): return .notConnected
        default: return .code(rc)
        }
    }

    /// Queues one SUBSCRIBE for `filters` (one QoS and one option set); returns its message id.
    func subscribe(_ filters: [String], qos: QoS, options: SubscribeOptions) throws -> Int32 {
        var mid: Int32 = 0
        let rc = withCStrings(filters) { pointers in
            mosquitto_subscribe_multiple(raw, &mid, Int32(filters.count), pointers, Int32(qos.rawValue), options.mosquittoOptions, nil)
        }
        if rc == Int32(MOSQ_ERR_INVAL.rawValue) {
            throw MosquittoError.invalidArgument("subscription filter in \(filters)")
        }
        try rc.check()
        return mid
    }

    /// Queues one UNSUBSCRIBE for `filters`; returns its message id.
    func unsubscribe(_ filters: [String]) throws -> Int32 {
        var mid: Int32 = 0
        let rc = withCStrings(filters) { pointers in
            mosquitto_unsubscribe_multiple(raw, &mid, Int32(filters.count), pointers, nil)
        }
        if rc == Int32(MOSQ_ERR_INVAL.rawValue) {
            throw MosquittoError.invalidArgument("unsubscribe filter in \(filters)")
        }
        try rc.check()
        return mid
    }

    /// Queues DISCONNECT: false when there is no connection to end. Takes `properties` and
    /// frees it.
    func disconnect(reason: ReasonCode, properties: OpaquePointer?) throws -> Bool {
        var list = properties
        defer { if list != nil { mosquitto_property_free_all(&list) } }
        let rc = mosquitto_disconnect_v5(raw, Int32(reason.rawValue), list)
        if rc == Int32(MOSQ_ERR_NO_CONN.rawValue) { return false }
        try rc.check()
        return true
    }
}

/// Calls `body` with a C array of C strings.
private func withCStrings<R>(_ strings: [String], _ body: (UnsafePointer<UnsafeMutablePointer<CChar>?>) -> R) -> R {
    var pointers: [UnsafeMutablePointer<CChar>?] = strings.map { strdup($0) }
    defer { for pointer in pointers { free(pointer) } }
    return pointers.withUnsafeMutableBufferPointer { body($0.baseAddress!) }
}

