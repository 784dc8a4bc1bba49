import IMClient
import IMGateway
import Logging
import ServiceLifecycle
import Mosquitto

/// A client for `broker` with a unique id (unless given) and test-friendly settings.
package func makeClient(
    _ broker: some BrokerUnderTest, id: String = "test-\(UInt32.random(in: 0...UInt32.max))",
    loop: MosquittoEventLoop = .shared,
    _ configure: (inout MosquittoClient.Configuration) -> Void = { _ in }
) -> MosquittoClient {
    var configuration = MosquittoClient.Configuration(clientID: id, host: "127.0.0.1", port: broker.port)
    configuration.keepalive = 10
    configuration.connectTimeout = 5
    configuration.username = broker.credentials?.username
    configuration.password = broker.credentials?.password
    configure(&configuration)
    return makeClient(configuration: configuration, loop: loop)
}

/// A client with `configuration` that the running test closes when it ends.
package func makeClient(configuration: MosquittoClient.Configuration, loop: MosquittoEventLoop = .shared) -> MosquittoClient {
    let client = MosquittoClient(configuration: configuration, loop: loop)
    TestResources.track { await client.close() }
    return client
}

/// `client`, closed by the running test when it ends.
package func tracked(_ client: IMClient) -> IMClient {
    TestResources.track { await client.close() }
    return client
}

/// Connects `client` and collects its messages.
package func connected(_ client: MosquittoClient) async throws -> Collector<MosquittoMessage> {
    let messages = Collector(client.messages)
    try await client.connect()
    return messages
}

/// Publishes a marker from a fresh client: whatever should have reached a subscriber
/// before it has arrived once the marker is seen (an event to await, not a sleep).
package func publishMarker(_ broker: TestBroker, topic: String) async throws {
    let client = makeClient(broker)
    try await client.connect()
    try await client.publish(topic: topic, string: "end", qos: .atLeastOnce)
    await client.close()
}

package extension MosquittoClient.Event {
    /// Whether this is `.connected` with `sessionPresent`, whatever else the broker announced.
    package func isConnected(sessionPresent: Bool) -> Bool {
        if case .connected(let result) = self { return result.sessionPresent == sessionPresent }
        return false
    }
}

/// Runs an in-process gateway the way imgw does: its ``GatewayServer/services`` in a service
/// group (no signals). ``GatewayServer/shutdown()`` ends it: the listener's end shuts the
/// group down.
package func runGateway(_ server: GatewayServer, logger: Logger) -> Task<Void, any Error> {
    let group = ServiceGroup(configuration: .init(services: server.services, gracefulShutdownSignals: [], logger: logger))
    return Task { try await group.run() }
}
