import IMGateway
import Logging
import Testing

@Suite("The embedded broker's configuration")
struct EmbeddedBrokerConfigurationTests {
    @Test("mosquitto.conf: the configured listener, persistence in the data directory, TCP_NODELAY for latency")
    func configuration() {
        var settings = GatewayConfiguration.defaults.embeddedBroker
        settings.host = "127.0.0.1"
        settings.port = 18830
        settings.dataDir = "/tmp/imgw-broker-test"
        let lines = EmbeddedBroker(settings: settings, logger: Logger(label: "test")).configurationText()
            .split(separator: "\n").map(String.init)
        #expect(lines.contains("listener 18830 127.0.0.1"))
        #expect(lines.contains("persistence_location /tmp/imgw-broker-test/"))
        #expect(lines.contains("set_tcp_nodelay true"))
    }
}
