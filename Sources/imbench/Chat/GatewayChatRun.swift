import IMGateway
import NIOCore

/// The gateway path: N sender devices chat to N receiver devices through imgw, over TLV,
/// all on one NIO event loop of this process (so a pair's receiver can hand window slots
/// back to its sender directly, see ``PairLink``).
enum GatewayChatRun {
    /// Logs in the receivers, then the senders, runs the workload, closes the devices.
    /// - Parameters:
    ///   - runID: Makes the device names unique (one per round: a round must not see
    ///     another's messages).
    ///   - title: The phase in log lines (default "gateway"), e.g. "gateway round 2/4".
    static func run(
        _ settings: ChatSettings, environment: BenchEnvironment, loop: any EventLoop, runID: String,
        title: String = "gateway"
    ) async throws -> ChatPhaseResult {
        let ledger = ChatLedger(pairs: settings.pairs)
        let links = try await loop.submit {
            (0..<settings.pairs).map { _ in NIOLoopBound(PairLink(), eventLoop: loop) }
        }.get()
        let (receivers, senders) = settings.duplex
            ? try await connectDuplex(settings, environment: environment, loop: loop, runID: runID, ledger: ledger, links: links, title: title)
            : try await connectSimplex(settings, environment: environment, loop: loop, runID: runID, ledger: ledger, links: links, title: title)

        let floodCounts = FloodCounts()
        var flooders: [BenchDevice] = []
        if settings.flooders > 0 {
            Log.info("\(title): logging in \(settings.flooders) flooder(s)")
            do {
                flooders = try await connectAll(
                    (0..<settings.flooders).map { "bench-\(runID)-flood\($0)" }, environment: environment, loop: loop,
                    receiptNotices: false
                ) { index in
                    { FloodSender(recipient: "bench-\(runID)-flood-sink", counts: floodCounts, window: settings.floodWindow, prefix: "f\(index)") }
                }
            } catch {
                for device in senders + receivers { await device.close() }
                throw error
            }
        }
        let allSenders = flooders + senders
        var watch: [ChatPhase.Watched] = [ChatPhase.Watched(label: "bench", pid: ProcessSample.ownPID())]
        if let pid = environment.gatewayPID { watch.append(ChatPhase.Watched(label: "gateway", pid: pid, threads: true)) }
        if let pid = environment.brokerPID { watch.append(ChatPhase.Watched(label: "broker", pid: pid)) }
        var result: ChatPhaseResult
        do {
            result = try await ChatPhase.measure(
                "gateway", title: title, settings: settings, ledger: ledger, watch: watch,
                start: { for sender in allSenders { sender.send(.start) } },
                stop: { for sender in allSenders { sender.send(.stop) } })
        } catch {
            for device in flooders + senders + receivers { await device.close() }
            throw error
        }
        for device in flooders + senders + receivers { await device.close() }
        if settings.flooders > 0 {
            let flood = floodCounts.current
            result.flood = flood
            Log.info("\(title): flooders sent \(flood.sent), the gateway took \(flood.accepted) and refused \(flood.refused)")
        }
        return result
    }

    /// One receiver and one sender device per flow: receivers first, so that their sessions
    /// (and inbox subscriptions) exist before anything is sent.
    private static func connectSimplex(
        _ settings: ChatSettings, environment: BenchEnvironment, loop: any EventLoop, runID: String, ledger: ChatLedger,
        links: [NIOLoopBound<PairLink>], title: String
    ) async throws -> (receivers: [BenchDevice], senders: [BenchDevice]) {
        let receiverNames = (0..<settings.pairs).map { "bench-\(runID)-r\($0)" }
        let senderNames = (0..<settings.pairs).map { "bench-\(runID)-s\($0)" }
        Log.info("\(title): logging in \(settings.pairs) receiver(s), then \(settings.pairs) sender(s)")
        let receivers = try await connectAll(receiverNames, environment: environment, loop: loop, receiptNotices: settings.receiptNotices) { pair in
            { ChatReceiver(pair: pair, ledger: ledger, link: links[pair].value) }
        }
        do {
            let senders = try await connectAll(senderNames, environment: environment, loop: loop, receiptNotices: settings.receiptNotices) { pair in
                {
                    ChatSender(
                        pair: pair, recipient: receiverNames[pair], ledger: ledger, settings: settings, link: links[pair].value)
                }
            }
            return (receivers, senders)
        } catch {
            for device in receivers { await device.close() }
            throw error
        }
    }

    /// Two devices per two flows, each sending one and receiving the other: device a_k sends
    /// flow 2k to b_k and receives flow 2k+1 from it. The b devices log in first; nothing is
    /// sent before all are in.
    private static func connectDuplex(
        _ settings: ChatSettings, environment: BenchEnvironment, loop: any EventLoop, runID: String, ledger: ChatLedger,
        links: [NIOLoopBound<PairLink>], title: String
    ) async throws -> (receivers: [BenchDevice], senders: [BenchDevice]) {
        let couples = settings.pairs / 2
        let aNames = (0..<couples).map { "bench-\(runID)-a\($0)" }
        let bNames = (0..<couples).map { "bench-\(runID)-b\($0)" }
        Log.info("\(title): logging in \(2 * couples) devices that send and receive (\(settings.pairs) flows)")
        // Device of couple k on side b: sends flow 2k+1 to a_k, receives flow 2k.
        let bDevices = try await connectAll(bNames, environment: environment, loop: loop, receiptNotices: settings.receiptNotices) { k in
            {
                DuplexDevice(
                    sender: ChatSender(pair: 2 * k + 1, recipient: aNames[k], ledger: ledger, settings: settings, link: links[2 * k + 1].value),
                    receiver: ChatReceiver(pair: 2 * k, ledger: ledger, link: links[2 * k].value))
            }
        }
        do {
            let aDevices = try await connectAll(aNames, environment: environment, loop: loop, receiptNotices: settings.receiptNotices) { k in
                {
                    DuplexDevice(
                        sender: ChatSender(pair: 2 * k, recipient: bNames[k], ledger: ledger, settings: settings, link: links[2 * k].value),
                        receiver: ChatReceiver(pair: 2 * k + 1, ledger: ledger, link: links[2 * k + 1].value))
                }
            }
            // Both sides send: every device gets the start and stop events.
            return (receivers: [], senders: bDevices + aDevices)
        } catch {
            for device in bDevices { await device.close() }
            throw error
        }
    }

    /// Connects and logs in one device per name, concurrently; fails with the first refusal.
    static func connectAll(
        _ names: [String], environment: BenchEnvironment, loop: any EventLoop, receiptNotices: Bool = true,
        behaviour: @escaping @Sendable (Int) -> @Sendable () -> any DeviceBehaviour
    ) async throws -> [BenchDevice] {
        let minter = TokenMinter(secret: environment.secret)
        var tokens: [String] = []
        for name in names { tokens.append(try await minter.mint(user: name, device: "bench", validFor: 3600)) }
        let frozen = tokens
        return try await withThrowingTaskGroup(of: (Int, BenchDevice).self) { group in
            for (index, name) in names.enumerated() {
                group.addTask {
                    do {
                        let device = try await BenchDevice.connect(
                            to: environment.gateway, webSocketPath: environment.webSocketPath, on: loop, token: frozen[index], deviceID: "bench",
                            receiptNotices: receiptNotices, behaviour: behaviour(index))
                        return (index, device)
                    } catch {
                        throw BenchError.loginRefused(user: name, "\(error)")
                    }
                }
            }
            var devices = [BenchDevice?](repeating: nil, count: names.count)
            do {
                for try await (index, device) in group { devices[index] = device }
            } catch {
                for case let device? in devices { await device.close() }
                throw error
            }
            return devices.map { $0! }
        }
    }
}
