import IMClient
import IMGateway

/// One device of the chaos run, as an app would run IMClient: it logs in through its link (a
/// load balancer in front of the gateways), shows every message its client surfaces (into
/// the ledger), sends chats one at a time (the next after the last one's answer), opens a new
/// client when one ends, and when the nemesis closes the app it closes the client between two
/// sends, keeps the stream position, and opens a new client with it later.
actor ChaosDevice {
    let index: Int
    let user: String
    let deviceID: String
    private let port: Int
    private let minter: TokenMinter
    private let ledger: ChaosLedger
    private var client: IMClient?
    /// Which client is current (events of an older one are ignored).
    private var generation = 0
    private var watcher: Task<Void, Never>?
    private var position: StreamPosition?
    private var sequence = 0
    /// The nemesis asked for the app to be closed for this many seconds.
    private var offlineRequest: Double?
    /// `.synced` of the current client, for the last phase.
    private var synced: (stream: AsyncStream<Void>, continuation: AsyncStream<Void>.Continuation)

    init(index: Int, user: String, deviceID: String, port: Int, minter: TokenMinter, ledger: ChaosLedger) {
        self.index = index
        self.user = user
        self.deviceID = deviceID
        self.port = port
        self.minter = minter
        self.ledger = ledger
        self.synced = AsyncStream.makeStream(of: Void.self)
    }

    /// "user/device", as the report names it.
    nonisolated var name: String { "\(user)/\(deviceID)" }

    // MARK: The client

    /// Opens a client and returns once it is logged in; tries again every half second.
    func open() async {
        while !Task.isCancelled {
            do {
                let token = try await minter.mint(user: user, device: deviceID, validFor: 86_400)
                var configuration = IMClient.Configuration(host: "127.0.0.1", port: port, token: token, deviceID: deviceID)
                configuration.syncPosition = position
                let client = try await IMClient.connect(configuration)
                generation += 1
                self.client = client
                synced = AsyncStream.makeStream(of: Void.self)
                let generation = generation
                watcher = Task { await self.watch(client, generation: generation) }
                ledger.cameUp(index)
                return
            } catch {
                ledger.note("login failed", "\(name): \(error)")
                try? await Task.sleep(for: .milliseconds(500))
            }
        }
    }

    /// Closes the client (the app goes away); keeps the position for the next ``open()``.
    /// The position is read once the watcher has shown every message the client surfaced
    /// (its event sequence ends after them): one taken earlier would count as had a message
    /// still waiting on the sequence, which the app would never see.
    func closeClient() async {
        guard let client else { return }
        self.client = nil
        generation += 1
        await client.close()
        await watcher?.value
        watcher = nil
        await keepPosition(of: client)
    }

    /// What an ended client leaves the app: its refusals retried (for the report) and its
    /// stream position, for the next client.
    private func keepPosition(of client: IMClient) async {
        ledger.retried(await client.retriedRefusals)
        position = await client.syncPosition ?? position
    }

    private func watch(_ client: IMClient, generation: Int) async {
        for await event in client.events {
            // Messages of a client being closed are still shown; its connection's ups and
            // downs no longer matter.
            let current = generation == self.generation
            switch event {
            case .message(let message):
                ledger.arrived(
                    ChaosArrival(
                        messageID: message.messageID, from: message.from, isCarbon: message.isCarbon, offset: message.streamOffset,
                        archived: message.isArchived),
                    at: index)
            case .reconnecting(let reconnecting) where current:
                if reconnecting.attempt <= 1 { ledger.note("connection lost", "\(name): \(reconnecting.cause)") }
                ledger.wentDown(index)
            case .reconnected where current:
                ledger.cameUp(index)
            case .synced where current:
                synced.continuation.yield()
            case .kicked(let code, let text) where current:
                ledger.note("kicked", "\(name): \(code) \(text ?? "")")
            case .error(let code, let text) where current:
                ledger.note("error", "\(name): \(code) \(text ?? "")")
            default:
                break
            }
        }
        // The client ended by itself (kicked, a login refused for good): the app opens a new one.
        guard generation == self.generation else { return }
        ledger.note("client ended", "\(name)")
        ledger.wentDown(index)
        await keepPosition(of: client)
        self.client = nil
        Task { await self.open() }
    }

    // MARK: Sending

    /// Asks for the app to be closed for `seconds`, between two sends.
    func requestOffline(_ seconds: Double) {
        offlineRequest = seconds
    }

    /// Sends chats until `deadline` (the ledger's clock): one every `interval()` seconds,
    /// to a conversation `pick()` draws; each waits for its answer.
    func sendUntil(_ deadline: Double, interval: @Sendable () -> Double, pick: @Sendable () -> ChaosConversation) async {
        while ledger.now < deadline, !Task.isCancelled {
            try? await Task.sleep(for: .seconds(interval()))
            if let seconds = offlineRequest {
                offlineRequest = nil
                await goOffline(for: seconds)
                continue
            }
            guard let client, ledger.now < deadline else { continue }
            sequence += 1
            let conversation = pick()
            let send = ChaosSend(messageID: "\(user)-\(deviceID)-\(sequence)", device: index, user: user, conversation: conversation, sequence: sequence)
            ledger.sending(send)
            do {
                switch conversation {
                case .user(let peer): _ = try await client.send(to: peer, text: "chaos \(sequence)", messageID: send.messageID)
                case .group(let group): _ = try await client.send(toGroup: group, text: "chaos \(sequence)", messageID: send.messageID)
                }
                ledger.answered(send.messageID, .acked)
            } catch {
                switch error {
                case .timeout: ledger.answered(send.messageID, .unanswered("no answer within the send timeout"))
                case .refused(let code, _): ledger.answered(send.messageID, .refused("\(code)"))
                default: ledger.answered(send.messageID, .unanswered("\(error)"))
                }
            }
        }
    }

    private func goOffline(for seconds: Double) async {
        ledger.log("device \(index + 1) (\(name)): the app closes for \(String(format: "%.1f", seconds)) s")
        await closeClient()
        ledger.forgetDown(index)
        try? await Task.sleep(for: .seconds(seconds))
        ledger.log("device \(index + 1) (\(name)): the app opens again")
        // Its spell offline is measured from the reopening, not from the closing.
        ledger.wentDown(index)
        await open()
    }

    // MARK: The end

    /// The last login: a new client with the kept position; returns once the gateway says it
    /// is caught up (SYNC), or after `seconds`.
    func lastLogin(within seconds: Double) async -> Bool {
        await closeClient()
        await open()
        let stream = synced.stream
        return await withTaskGroup(of: Bool.self) { group in
            group.addTask {
                for await _ in stream { return true }
                return false
            }
            group.addTask {
                try? await Task.sleep(for: .seconds(seconds))
                return false
            }
            let first = await group.next() ?? false
            group.cancelAll()
            return first
        }
    }

    /// Closes the client for good.
    func finish() async {
        await closeClient()
        ledger.forgetDown(index)
    }
}
