@testable import IMGateway
import Mosquitto
import Testing

/// What the gateway makes of a broker's CONNACK, without a broker.
@Suite("BrokerFit: what a broker's CONNACK means for the gateway")
struct BrokerFitTests {
    private let settings = GatewayConfiguration.BrokerSettings()

    @Test("a broker that announces nothing (the specification's defaults) fits as configured")
    func defaults() {
        let fit = BrokerFit(BrokerCapabilities(), broker: settings)
        #expect(fit.isUsable)
        #expect(fit.notes.isEmpty)
        #expect(fit.maximumQoS == .exactlyOnce)
        #expect(fit.publishWindow == settings.maxInflight)
        #expect(DeviceConnection.features(broker: fit, archive: false).contains(.qos2Chat))
    }

    @Test("QoS 0 only, no retained messages, no wildcards: imgw cannot work there, and says why")
    func unusable() {
        var capabilities = BrokerCapabilities()
        capabilities.maximumQoS = .atMostOnce
        capabilities.retainAvailable = false
        capabilities.wildcardSubscriptionAvailable = false
        let fit = BrokerFit(capabilities, broker: settings)
        #expect(!fit.isUsable)
        #expect(fit.problems.count == 3)
        #expect(fit.refusal.contains("Maximum QoS 0"))
        #expect(fit.refusal.contains("Retain Available 0"))
        #expect(fit.refusal.contains("Wildcard Subscription Available 0"))
    }

    @Test("at most QoS 1: usable, QoS 2 chat is not offered")
    func qos1() {
        var capabilities = BrokerCapabilities()
        capabilities.maximumQoS = .atLeastOnce
        let fit = BrokerFit(capabilities, broker: settings)
        #expect(fit.isUsable)
        #expect(fit.maximumQoS == .atLeastOnce)
        #expect(!DeviceConnection.features(broker: fit, archive: false).contains(.qos2Chat))
        #expect(DeviceConnection.features(broker: fit, archive: false).contains(.groups))
        #expect(fit.notes.contains { $0.contains("at most QoS 1") })
    }

    @Test("a shorter session expiry, a small receive maximum, a packet limit and a server keepalive are told; the window follows the receive maximum")
    func notes() {
        var capabilities = BrokerCapabilities()
        capabilities.sessionExpiryInterval = 300
        capabilities.receiveMaximum = 1
        capabilities.maximumPacketSize = 65536
        capabilities.serverKeepAlive = 20
        let fit = BrokerFit(capabilities, broker: settings)
        #expect(fit.isUsable)
        #expect(fit.publishWindow == 1)
        #expect(fit.notes.count == 4)
        #expect(fit.notes.contains { $0.contains("300 s") && $0.contains("604800") })
        #expect(fit.notes.contains { $0.contains("65536 bytes") })
        // A session expiry at least the configured one is nothing to tell.
        capabilities.sessionExpiryInterval = 604_800
        #expect(BrokerFit(capabilities, broker: settings).notes.count == 3)
    }
}

/// The device's code for a filter the broker refused.
@Suite("A broker's SUBACK refusal, as the device's error code")
struct SubscriptionRefusalTests {
    @Test("not authorised: FORBIDDEN; a filter it cannot take: INVALID_TOPIC; its quota: LIMIT_REACHED; anything else: BROKER_UNAVAILABLE")
    func codes() {
        #expect(DeviceRequests.code(refusal: .notAuthorized) == .forbidden)
        for reason in [ReasonCode.topicFilterInvalid, .sharedSubscriptionsNotSupported, .subscriptionIdentifiersNotSupported, .wildcardSubscriptionsNotSupported] {
            #expect(DeviceRequests.code(refusal: reason) == .invalidTopic, "\(reason)")
        }
        #expect(DeviceRequests.code(refusal: .quotaExceeded) == .limitReached)
        #expect(DeviceRequests.code(refusal: .unspecifiedError) == .brokerUnavailable)
    }
}
