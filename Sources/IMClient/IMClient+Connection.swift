import IMWire
import NIOCore
import NIOPosix

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

// The connection: the reader (frames in, actions out through the InboundRouter), the
// keepalive, and the end of the connection.
extension IMClient {
    /// Sends LOGIN, then reads frames until the connection ends.
    func run() async {
        do {
            try await channel.executeThenClose { inbound, outbound in
                self.outbound = outbound
                let login = LoginRequest(token: configuration.token, deviceID: configuration.deviceID)
                try await write(IMMessage.login(login).frame(sequence: sequence.next(), timestamp: Self.unixSeconds(), sessionID: Self.sessionID))
                do {
                    for try await frame in inbound { await receive(frame) }
                } catch let error as IMWireError where error.isFatal {
                    // The stream is no longer framed: say why (if we still can), then close.
                    try? await outbound.write(error.errorFrame(sequence: sequence.next(), timestamp: Self.unixSeconds(), sessionID: Self.sessionID))
                }
            }
        } catch {
            // Closed, reset, or LOGIN not written: the connection is over either way.
        }
        connectionEnded()
    }

    func receive(_ frame: IMFrame) async {
        lastReceived = clock.now
        for action in router.react(to: frame, timestamp: Self.unixSeconds()) {
            switch action {
            case .loggedIn(let ok):
                finishLogin(.success(session(from: ok)))
            case .loginRefused(let code, let message):
                finishLogin(.failure(.loginRefused(code, message)))
            case .settle(let ack):
                pending.settle(ack.sequence, with: .success(ack))?.resume(returning: .success(ack))
            case .emit(let event):
                eventSink.yield(event)
            case .reply(let reply):
                try? await write(reply)
            }
        }
    }

    /// Heartbeats when nothing was sent for `interval`; closes the connection when nothing
    /// arrived for two intervals plus a margin (PROTOCOL.md 6.2 and 10).
    func keepalive(interval: Duration) async {
        let deadAfter = interval * 2 + min(interval, .seconds(10))
        while !isClosed {
            let now = clock.now
            if now - lastReceived >= deadAfter {
                channel.channel.close(promise: nil)
                return
            }
            if now - lastSent >= interval {
                try? await write(IMFrame.heartbeat(sequence: sequence.next(skipping: pending.contains), timestamp: Self.unixSeconds(), sessionID: Self.sessionID))
                continue
            }
            do {
                try await Task.sleep(until: min(lastSent + interval, lastReceived + deadAfter), clock: .continuous)
            } catch {
                return
            }
        }
    }

    func connectionEnded() {
        isClosed = true
        outbound = nil
        keepaliveTask?.cancel()
        finishLogin(.failure(.disconnected))
        for waiter in pending.failAll(with: .disconnected) { waiter.resume(returning: .failure(.disconnected)) }
        if router.isLoggedIn && !endedByApplication { eventSink.yield(.disconnected) }
        eventSink.finish()
    }

    // MARK: Helpers

    static func unixSeconds() -> UInt32 {
        UInt32(clamping: Int(Date().timeIntervalSince1970))
    }

    /// A short reason for a failed connect: the system's text where there is one.
    static func explain(_ error: any Error) -> String {
        switch error {
        case let error as NIOConnectionError:
            if let first = error.connectionErrors.first { return explain(first.error) }
            if let dns = error.dnsAError ?? error.dnsAAAAError { return "cannot resolve \(error.host): \(dns)" }
            return "no address for \(error.host)"
        case let error as IOError:
            return String(cString: strerror(error.errnoCode))
        case ChannelError.connectTimeout(let amount):
            return "no answer within \(Duration(amount))"
        default:
            return "\(error)"
        }
    }
}
