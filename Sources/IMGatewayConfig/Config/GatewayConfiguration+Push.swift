import Foundation

extension GatewayConfiguration {
    /// `push`: the offline-push webhook. When a chat reaches a user none of whose devices is
    /// online, one gateway of the cluster POSTs a signed JSON notification to `url`, so that
    /// the app's backend can send a mobile push (docs/OPERATIONS.md, "Offline push").
    public struct PushSettings: Codable, Sendable, Hashable {
        /// What a notification says of the message's content.
        public enum Preview: String, Codable, Sendable, Hashable, CaseIterable {
            /// Nothing: the receiver learns only that a message is waiting, and from whom.
            case none
            /// The start of the text, up to `preview_length` characters.
            case text
        }

        /// `url`: where notifications are POSTed, `http://` or `https://`. Default none: off.
        public var url: String?
        /// `secret`: the key of the `X-IMGW-Signature` HMAC; at least 32 bytes once `url` is set.
        public var secret: String
        /// `preview`: `none` (the default) or `text`.
        public var preview: Preview
        /// `preview_length`: the most characters of text a preview carries. Default 100.
        public var previewLength: Int
        /// `delay_ms`: how long a chat waits before its recipient's presence is looked at, so
        /// that a login on another gateway (or broker node) has arrived. Default 250.
        public var delayMilliseconds: Int
        /// `timeout`: seconds one POST may take. Default 5.
        public var timeout: Int
        /// `max_attempts`: POSTs per notification, the first included, before it is given up;
        /// retries wait 1, 2, 4... s, at most 60 s. Default 6.
        public var maxAttempts: Int
        /// `queue`: notifications waiting or in flight at most; more are dropped and counted.
        /// Default 10,000.
        public var queue: Int
        /// `concurrency`: POSTs in flight at most. Default 16.
        public var concurrency: Int

        /// Creates push settings with the defaults (no URL: off).
        public init(
            url: String? = nil, secret: String = "", preview: Preview = .none, previewLength: Int = 100,
            delayMilliseconds: Int = 250, timeout: Int = 5, maxAttempts: Int = 6, queue: Int = 10_000, concurrency: Int = 16
        ) {
            self.url = url
            self.secret = secret
            self.preview = preview
            self.previewLength = previewLength
            self.delayMilliseconds = delayMilliseconds
            self.timeout = timeout
            self.maxAttempts = maxAttempts
            self.queue = queue
            self.concurrency = concurrency
        }

        /// Whether notifications are sent.
        public var enabled: Bool { url != nil }

        enum CodingKeys: String, CodingKey, CaseIterable {
            case url, secret, preview
            case previewLength = "preview_length"
            case delayMilliseconds = "delay_ms"
            case timeout
            case maxAttempts = "max_attempts"
            case queue, concurrency
        }

        public init(from decoder: any Decoder) throws {
            try decoder.rejectUnknownKeys(CodingKeys.self)
            let c = try decoder.container(keyedBy: CodingKeys.self)
            let d = Self()
            self.url = try c.value(.url, or: d.url)
            self.secret = try c.value(.secret, or: d.secret)
            self.preview = try c.value(.preview, or: d.preview)
            self.previewLength = try c.value(.previewLength, or: d.previewLength)
            self.delayMilliseconds = try c.value(.delayMilliseconds, or: d.delayMilliseconds)
            self.timeout = try c.value(.timeout, or: d.timeout)
            self.maxAttempts = try c.value(.maxAttempts, or: d.maxAttempts)
            self.queue = try c.value(.queue, or: d.queue)
            self.concurrency = try c.value(.concurrency, or: d.concurrency)
        }

        /// The problems of these settings, each naming its key under `push.`.
        func check(_ check: inout Checker) {
            check.range("push.preview_length", previewLength, 1...10_000)
            check.range("push.delay_ms", delayMilliseconds, 0...10_000)
            check.range("push.timeout", timeout, 1...300)
            check.range("push.max_attempts", maxAttempts, 1...100)
            check.range("push.queue", queue, 1...10_000_000)
            check.range("push.concurrency", concurrency, 1...1024)
            guard let url else { return }
            let parsed = URL(string: url)
            if !["http", "https"].contains(parsed?.scheme ?? "") || (parsed?.host ?? "").isEmpty {
                check.fail("push.url", url.debugDescription, "is not an http:// or https:// URL")
            }
            // The secret itself is never repeated in a message.
            if secret.utf8.count < 32 {
                check.fail("push.secret", "(\(secret.utf8.count) bytes)", "is shorter than 32 bytes; the receiver checks signatures with it: use a random one")
            }
        }
    }
}
