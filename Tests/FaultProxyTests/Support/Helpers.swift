import FaultProxy

/// Starts a test server in `mode` and a proxy in front of it, runs `body`, and stops both
/// whether or not `body` threw.
@discardableResult
func withProxy<Result>(
    _ mode: TestServer.Mode = .echo,
    profile: FaultProfile = .none,
    seed: UInt64? = 1,
    _ body: (FaultProxy, TestServer) async throws -> Result
) async throws -> Result {
    let server = try await TestServer.start(mode)
    let proxy: FaultProxy
    do {
        proxy = try await FaultProxy.start(upstreamPort: server.port, profile: profile, seed: seed)
    } catch {
        await server.stop()
        throw error
    }
    do {
        let result = try await body(proxy, server)
        await proxy.stop()
        await server.stop()
        return result
    } catch {
        await proxy.stop()
        await server.stop()
        throw error
    }
}

/// `count` bytes of a pattern that differs by offset and by `salt`, so that a byte that is
/// lost, duplicated or moved shows.
func pattern(_ count: Int, salt: Int = 0) -> [UInt8] {
    (0 ..< count).map { UInt8(truncatingIfNeeded: ($0 &* 31) ^ ($0 >> 8) ^ ($0 >> 16) &+ salt) }
}

/// `number` as 4 big-endian bytes.
func bigEndian(_ number: Int) -> [UInt8] {
    [UInt8(truncatingIfNeeded: number >> 24), UInt8(truncatingIfNeeded: number >> 16),
     UInt8(truncatingIfNeeded: number >> 8), UInt8(truncatingIfNeeded: number)]
}

/// Sends `bytes` and returns what comes back (an echo), in `chunk`-sized writes.
func roundTrip(_ client: TestClient, _ bytes: [UInt8], chunk: Int = 64 * 1024) async throws -> [UInt8] {
    var offset = 0
    while offset < bytes.count {
        let end = min(offset + chunk, bytes.count)
        try await client.send(Array(bytes[offset ..< end]))
        offset = end
    }
    return try await client.read(count: bytes.count)
}
