/// The client's frame sequence numbers (PROTOCOL.md 5.1): start at 1, add 1 per frame, wrap
/// from `0xFFFFFFFF` to 0, and never hand out a number whose frame still awaits its ACK.
struct SequenceCounter: Hashable, Sendable {
    /// The last number handed out.
    private(set) var last: UInt32

    /// A counter whose first number is `last &+ 1` (1 by default).
    init(last: UInt32 = 0) {
        self.last = last
    }

    /// The next number for which `inUse` is false.
    ///
    /// `inUse` must be false for some number (it is: at most a few thousand frames can await
    /// an ACK at once).
    mutating func next(skipping inUse: (UInt32) -> Bool = { _ in false }) -> UInt32 {
        repeat {
            last &+= 1
        } while inUse(last)
        return last
    }
}
