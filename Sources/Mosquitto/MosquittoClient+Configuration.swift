extension MosquittoClient {
    /// Everything needed to connect one client. Value type: build it, then hand it to
    /// `MosquittoClient.init(configuration:loop:)`.
    public struct Configuration: Sendable {
        /// The MQTT client identifier. A persistent session is bound to it.
        public var clientID: String
        /// Broker host name or address.
        public var host: String
        /// Broker port (1883 plain, 8883 TLS by convention).
        public var port: Int
        /// Keepalive in seconds (0 disables; otherwise 5...65535). Default 60.
        public var keepalive: Int
        /// Start a new session (true) or resume the one kept for `clientID` (false).
        public var cleanStart: Bool
        /// MQTT v5 session expiry interval in seconds, sent on CONNECT. With
        /// `cleanStart == false` the broker keeps the session (subscriptions, queued
        /// messages) this long after a disconnect. 0 ends the session at disconnect;
        /// `UInt32.max` never expires it. Ignored on 3.1.1 (sessions persist there).
        public var sessionExpiryInterval: UInt32
        /// Protocol version. MQTT v5 by default.
        public var protocolVersion: ProtocolVersion
        /// Credentials, if the broker wants them.
        public var username: String?
        public var password: String?
        /// TLS, if the listener wants it.
        public var tls: TLS?
        /// The last will, published by the broker if the connection ends without a
        /// normal DISCONNECT (or with DISCONNECT reason 0x04).
        public var will: Will?
        /// How many of our publishes may wait for the broker at once (QoS 0 ones until
        /// written, QoS 1/2 until PUBACK/PUBCOMP). Further `publish` calls wait for a
        /// slot, so libmosquitto's unbounded queue never grows past this. Default 128.
        public var maxInflightPublishes: Int
        /// v5 receive maximum advertised to the broker (QoS 1/2 it may send us
        /// unacknowledged). Default 20, libmosquitto's.
        ///
        /// mosquitto 2.0.11 exceeds it at QoS 2 once messages queue up for the client
        /// (upstream #2301), and libmosquitto 2.0 enforces what it advertises by closing the
        /// connection. With libmosquitto's internals (``MosquittoLibrary/Internal/receiveMaximumOverrun``)
        /// the client accepts more than it advertises instead. Without them (the public API
        /// only), a client that leaves this at its default advertises 65,535, which no broker
        /// overruns; one that sets it advertises it, and its subscriptions ask for QoS 1 at
        /// most (a QoS 2 one is granted QoS 1: at least once, the application de-duplicates),
        /// because libmosquitto 2.0 ends a connection whose QoS 2 quota the broker overruns and
        /// then hands over the session's in-flight messages again at each reconnect.
        public var receiveMaximum: UInt16 {
            get { requestedReceiveMaximum ?? Self.defaultReceiveMaximum }
            set { requestedReceiveMaximum = newValue }
        }

        /// The receive maximum set, if one was.
        var requestedReceiveMaximum: UInt16?
        static let defaultReceiveMaximum: UInt16 = 20

        /// What CONNECT advertises: ``receiveMaximum``, unless libmosquitto cannot tolerate
        /// a broker's overrun of it and none was set (then 65,535).
        var advertisedReceiveMaximum: UInt16 {
            MosquittoLibrary.advertisedReceiveMaximum(requested: requestedReceiveMaximum, configured: receiveMaximum)
        }

        /// The highest QoS a subscription asks for
        /// (``MosquittoLibrary/subscriptionQoSLimit(requested:)``).
        var subscriptionQoSLimit: QoS {
            MosquittoLibrary.subscriptionQoSLimit(requested: requestedReceiveMaximum)
        }
        /// How received QoS 1 messages are acknowledged to the broker.
        public var acknowledgement: Acknowledgement
        /// Give up on a connect without CONNACK after this many seconds. Default 10.
        public var connectTimeout: Double
        /// Whether received messages carry their MQTT v5 properties
        /// (``MosquittoMessage/properties``). Default true. Copying them out of libmosquitto
        /// costs several allocations per message (each string is copied twice); a client that
        /// never reads them turns this off, and its messages carry empty properties.
        public var receivesProperties: Bool
        /// With ``receivesProperties`` off: whether received messages still carry their
        /// correlation data (one copy, nothing else). Default false.
        public var receivesCorrelationData: Bool
        /// Whether QoS 1/2 publishes waiting for the broker fail (with
        /// ``MosquittoError/connectionLost(_:)``) when the connection ends. Default false:
        /// libmosquitto sends them again after the next ``MosquittoClient/connect()``, so they
        /// keep waiting for it. A client that is never connected again turns this on, or they
        /// wait until it is closed.
        public var failsPublishesOnLoss: Bool
        /// Whether libmosquitto's copy of the will is freed once CONNACK accepts the
        /// connection. The broker has the will from CONNECT and publishes it as usual when
        /// this connection ends; a later ``MosquittoClient/connect()`` sends none. For a
        /// client that is never connected again (thousands of them, each holding its will's
        /// topic, payload and properties). Default false.
        public var forgetsWillOnceConnected: Bool

        /// A configuration with the given identity and defaults for everything else.
        public init(clientID: String, host: String = "127.0.0.1", port: Int = 1883) {
            self.clientID = clientID
            self.host = host
            self.port = port
            self.keepalive = 60
            self.cleanStart = true
            self.sessionExpiryInterval = 0
            self.protocolVersion = .v5
            self.username = nil
            self.password = nil
            self.tls = nil
            self.will = nil
            self.maxInflightPublishes = 128
            self.requestedReceiveMaximum = nil
            self.acknowledgement = .automatic
            self.connectTimeout = 10
            self.receivesProperties = true
            self.receivesCorrelationData = false
            self.failsPublishesOnLoss = false
            self.forgetsWillOnceConnected = false
        }
    }

    /// MQTT protocol versions libmosquitto speaks.
    public enum ProtocolVersion: Int32, Sendable {
        case v311 = 4
        case v5 = 5
    }

    /// When the PUBACK for a received QoS 1 message leaves.
    public enum Acknowledgement: Sendable, Hashable {
        /// As soon as libmosquitto has read the message (before the application sees
        /// it). If the process dies before the application handled the message, it is
        /// lost: the broker already forgot it.
        case automatic
        /// "Ack-through": while any received QoS 1 message has not been passed to
        /// `MosquittoClient.acknowledge(_:)`, nothing this client queued leaves the
        /// process: libmosquitto's out-queue is FIFO and shared, so the hold also
        /// delays our own publishes, PINGREQ and subscriptions. Once every delivered
        /// message is acknowledged everything queued is written. If the process dies
        /// (or `abort()` is called) meanwhile, the PUBACKs never reach the broker, which
        /// redelivers those messages (DUP) to the next connection of a persistent
        /// session with the same client id. Protects QoS 1 deliveries; subscribe with
        /// QoS 1 for them (a QoS 2 message is handed over only after PUBREC went out,
        /// so a crash can still lose it). Keep holds short: a hold longer than
        /// keepalive × 1.5 lets the broker drop the connection.
        case manual
    }

    /// TLS settings (libmosquitto `mosquitto_tls_set` and friends).
    public struct TLS: Sendable, Hashable {
        /// PEM file of the CA(s) that signed the broker's certificate.
        public var caFile: String?
        /// Directory of CA certificates (c_rehash'ed).
        public var caPath: String?
        /// Client certificate and key (PEM), for brokers that require them.
        public var certFile: String?
        public var keyFile: String?
        /// Skip host name verification. For tests only.
        public var insecure: Bool

        public init(caFile: String? = nil, caPath: String? = nil, certFile: String? = nil, keyFile: String? = nil, insecure: Bool = false) {
            self.caFile = caFile
            self.caPath = caPath
            self.certFile = certFile
            self.keyFile = keyFile
            self.insecure = insecure
        }
    }

    /// The last will and testament.
    public struct Will: Sendable {
        public var topic: String
        public var payload: [UInt8]
        public var qos: QoS
        public var retain: Bool
        /// v5 properties of the will message (content type, user properties, expiry...).
        public var properties: MQTTProperties

        public init(topic: String, payload: [UInt8], qos: QoS = .atLeastOnce, retain: Bool = false, properties: MQTTProperties = MQTTProperties()) {
            self.topic = topic
            self.payload = payload
            self.qos = qos
            self.retain = retain
            self.properties = properties
        }
    }
}
