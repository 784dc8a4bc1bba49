import IMWire
import Testing

@testable import IMGateway

@Suite("PushQueue")
struct PushQueueTests {
    static func settings(capacity: Int = 100, concurrency: Int = 2, delay: Double = 0.25, maxAttempts: Int = 3) -> PushQueue.Settings {
        var settings = PushQueue.Settings(.init(url: "http://h/p", secret: "", maxAttempts: maxAttempts, queue: capacity, concurrency: concurrency))
        settings.delay = delay
        settings.timerResolution = 0
        return settings
    }

    static func chat(to: String, id: String = "m1", from: String = "alice") -> PushNotification {
        PushNotification(chat: ChatPayload(id: id, from: from, to: to, ts: 1, type: "text", text: "hi"), preview: .none, previewLength: 10)
    }

    static func ready(_ settings: PushQueue.Settings = settings()) -> PushQueue {
        var queue = PushQueue(settings: settings)
        queue.presenceComplete(true)
        return queue
    }

    @Test("a notification goes out after the delay, not before, and the timer is asked for once")
    func delay() {
        var queue = Self.ready()
        #expect(queue.offer(Self.chat(to: "bob"), now: 10) == .queued)
        #expect(queue.nextWakeUp(now: 10) == 10.25)
        #expect(queue.offer(Self.chat(to: "carol"), now: 10.1) == .queued)
        #expect(queue.nextWakeUp(now: 10.1) == nil, "an earlier wake-up is armed")
        #expect(queue.takeDue(now: 10.2) == [])
        queue.wokeUp(at: 10.25)
        let steps = queue.takeDue(now: 10.25)
        #expect(steps == [.post(.init(notification: Self.chat(to: "bob"), number: 1))])
        #expect(queue.nextWakeUp(now: 10.25) == 10.35, "carol's")
        #expect(queue.inFlight == 1 && queue.count == 2)
    }

    @Test("notifications due within one tick of the timer resolution share a wake-up")
    func sharedWakeUps() {
        var settings = Self.settings(capacity: 1000)
        settings.timerResolution = 0.25
        var queue = Self.ready(settings)
        var wakeUps: [Double] = []
        for index in 0..<100 {
            let now = Double(index) * 0.002  // 100 chats in 0.2 s, due 0.25...0.448
            _ = queue.offer(Self.chat(to: "bob", id: "m\(index)"), now: now)
            if let wakeUp = queue.nextWakeUp(now: now) { wakeUps.append(wakeUp) }
        }
        #expect(wakeUps == [0.25], "the first is due at 0.25 exactly")
        queue.wokeUp(at: 0.25)
        #expect(queue.takeDue(now: 0.25).count == 1)
        #expect(queue.nextWakeUp(now: 0.25) == 0.5, "the other 99 at the next tick")
        #expect(queue.takeDue(now: 0.5).count == 1, "one more: two in flight at most")
    }

    @Test("never for a recipient with a device online, whenever he came online before the time")
    func online() {
        var queue = Self.ready()
        queue.presence(user: "bob", device: "phone", online: true)
        _ = queue.offer(Self.chat(to: "bob"), now: 0)
        _ = queue.offer(Self.chat(to: "carol"), now: 0)
        queue.presence(user: "carol", device: "tablet", online: true)
        #expect(queue.takeDue(now: 1) == [.suppressed(Self.chat(to: "bob")), .suppressed(Self.chat(to: "carol"))])
        queue.presence(user: "carol", device: "tablet", online: false)
        _ = queue.offer(Self.chat(to: "carol", id: "m2"), now: 1)
        #expect(queue.takeDue(now: 2) == [.post(.init(notification: Self.chat(to: "carol", id: "m2"), number: 1))])
        #expect(queue.count == 1)
    }

    @Test("nothing goes out until every device's presence is known")
    func presenceIncomplete() {
        var queue = PushQueue(settings: Self.settings())
        _ = queue.offer(Self.chat(to: "bob"), now: 0)
        #expect(queue.takeDue(now: 5) == [] && queue.nextWakeUp(now: 5) == nil)
        queue.presence(user: "bob", device: "phone", online: true)
        queue.presenceComplete(true)
        #expect(queue.takeDue(now: 5) == [.suppressed(Self.chat(to: "bob"))])
        queue.presenceComplete(false)
        _ = queue.offer(Self.chat(to: "carol"), now: 5)
        #expect(queue.takeDue(now: 9) == [], "after a reconnect, until the marker")
    }

    @Test("a repeat of a message is refused; a full queue refuses more")
    func duplicatesAndCapacity() {
        var queue = Self.ready(Self.settings(capacity: 2))
        #expect(queue.offer(Self.chat(to: "bob"), now: 0) == .queued)
        #expect(queue.offer(Self.chat(to: "bob"), now: 0) == .duplicate)
        #expect(queue.offer(Self.chat(to: "bob", id: "m2"), now: 0) == .queued)
        #expect(queue.offer(Self.chat(to: "bob", id: "m3"), now: 0) == .full)
        #expect(queue.offer(Self.chat(to: "carol"), now: 0) == .full, "in flight counts too")
        let steps = queue.takeDue(now: 1)
        #expect(steps.count == 2)
        guard case .post(let attempt) = steps[0] else { Issue.record("not a post"); return }
        #expect(queue.finished(attempt, .delivered, now: 1) == .delivered)
        #expect(queue.offer(Self.chat(to: "bob", id: "m3"), now: 1) == .queued)
    }

    @Test("at most `concurrency` in flight; a finished POST lets the next go")
    func concurrency() {
        var queue = Self.ready(Self.settings(concurrency: 2))
        for id in ["a", "b", "c"] { _ = queue.offer(Self.chat(to: "bob", id: id), now: 0) }
        let first = queue.takeDue(now: 1)
        #expect(first.count == 2 && queue.inFlight == 2)
        #expect(queue.nextWakeUp(now: 1) == nil, "held by the limit, not by time")
        guard case .post(let attempt) = first[0] else { Issue.record("not a post"); return }
        _ = queue.finished(attempt, .delivered, now: 1)
        #expect(queue.takeDue(now: 1) == [.post(.init(notification: Self.chat(to: "bob", id: "c"), number: 1))])
    }

    @Test("a retryable failure is retried after 1, 2 s... up to max_attempts; another is given up at once")
    func retries() {
        var queue = Self.ready(Self.settings(maxAttempts: 3))
        _ = queue.offer(Self.chat(to: "bob"), now: 0)
        var now = 0.25
        var attempts: [Int] = []
        var finishes: [PushQueue.Finish] = []
        while case .post(let attempt)? = queue.takeDue(now: now).first {
            attempts.append(attempt.number)
            let finish = queue.finished(attempt, .failed(reason: "HTTP 500", retryable: true), now: now)
            finishes.append(finish)
            guard case .retry(let at) = finish else { break }
            #expect(queue.takeDue(now: at - 0.01) == [], "not before its time")
            now = at
        }
        #expect(attempts == [1, 2, 3])
        #expect(finishes == [.retry(at: 1.25), .retry(at: 3.25), .gaveUp(reason: "HTTP 500")])
        #expect(queue.count == 0)

        _ = queue.offer(Self.chat(to: "bob", id: "m2"), now: 10)
        guard case .post(let attempt)? = queue.takeDue(now: 11).first else { Issue.record("not posted"); return }
        #expect(queue.finished(attempt, .failed(reason: "HTTP 400", retryable: false), now: 11) == .gaveUp(reason: "HTTP 400"))
        #expect(queue.retryDelay(after: 10) == 60, "at most a minute")
    }

    @Test("a retry is not sent once the recipient came online")
    func retryAfterLogin() {
        var queue = Self.ready()
        _ = queue.offer(Self.chat(to: "bob"), now: 0)
        guard case .post(let attempt)? = queue.takeDue(now: 1).first else { Issue.record("not posted"); return }
        _ = queue.finished(attempt, .failed(reason: "timed out", retryable: true), now: 1)
        queue.presence(user: "bob", device: "phone", online: true)
        #expect(queue.takeDue(now: 2) == [.suppressed(Self.chat(to: "bob"))])
    }
}

@Suite("OnlineUsers")
struct OnlineUsersTests {
    @Test("a user is online while any of his devices is; repeats change nothing")
    func devices() {
        var online = OnlineUsers()
        online.apply(user: "bob", device: "phone", online: true)
        online.apply(user: "bob", device: "phone", online: true)
        online.apply(user: "bob", device: "tablet", online: true)
        online.apply(user: "carol", device: "phone", online: false)
        #expect(online.isOnline("bob") && !online.isOnline("carol") && online.count == 1)
        online.apply(user: "bob", device: "phone", online: false)
        #expect(online.isOnline("bob"), "the tablet")
        online.apply(user: "bob", device: "tablet", online: false)
        #expect(!online.isOnline("bob") && online.count == 0)
    }
}

@Suite("PushNotification")
struct PushNotificationTests {
    @Test("the body: sorted keys, a preview only when configured and only of text")
    func body() {
        let chat = ChatPayload(id: "m-1", from: "alice", to: "bob", ts: 1_735_689_600_123, type: "text", text: "Hello, Bob! 👋 How are you?")
        let none = PushNotification(chat: chat, preview: .none, previewLength: 100)
        #expect(String(decoding: none.body, as: UTF8.self) == #"{"event":"chat","from":"alice","id":"m-1","to":"bob","ts":1735689600123,"type":"text"}"#)
        let text = PushNotification(chat: chat, preview: .text, previewLength: 13)
        #expect(text.preview == "Hello, Bob! 👋")
        let image = ChatPayload(id: "m-2", from: "alice", to: "bob", ts: 1, type: "image", data: "AAAA")
        #expect(PushNotification(chat: image, preview: .text, previewLength: 100).preview == nil)
    }

    @Test("from a device's CHAT it is the same as from the chat payload the gateway publishes")
    func fromSend() {
        let send = ChatSend(to: "bob", messageID: "m-1", content: .text("Hello, Bob! 👋 How are you?"))
        let settings = GatewayConfiguration.PushSettings(preview: .text, previewLength: 13)
        let notification = PushNotification(send: send, from: "alice", serverTime: 1_735_689_600_123, settings: settings)
        let payload = ChatPayload(send: send, from: "alice", serverTime: 1_735_689_600_123)
        #expect(notification == PushNotification(chat: payload, preview: .text, previewLength: 13))
        #expect(notification.preview == "Hello, Bob! 👋")
    }

    /// The vector, computed with Python:
    /// `hmac.new(b"0123456789abcdef0123456789abcdef", b"1735689600." + body, "sha256").hexdigest()`.
    @Test("the signature: HMAC-SHA256 of the seconds, a dot and the body")
    func signature() {
        let body = Array(#"{"event":"chat","from":"alice","id":"m-1","to":"bob","ts":1735689600123,"type":"text"}"#.utf8)
        let value = PushSignature(secret: "0123456789abcdef0123456789abcdef").value(body: body, time: 1_735_689_600)
        #expect(value == "t=1735689600,v1=76167464b185b8dcce307d1d35bbb694484d8c565377377aef310ea93961d327")
    }
}
