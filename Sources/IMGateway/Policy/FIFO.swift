/// A first-in first-out queue with O(1) amortised append and pop, for the policies.
struct FIFO<Element> {
    private var storage: [Element] = []
    private var head = 0

    var isEmpty: Bool { self.head == self.storage.count }
    var count: Int { self.storage.count - self.head }
    var first: Element? { self.isEmpty ? nil : self.storage[self.head] }

    mutating func append(_ element: Element) { self.storage.append(element) }

    mutating func popFirst() -> Element? {
        guard !self.isEmpty else { return nil }
        let element = self.storage[self.head]
        self.head += 1
        if self.head == self.storage.count {
            self.storage.removeAll(keepingCapacity: true)
            self.head = 0
        } else if self.head >= 64 && self.head * 2 >= self.storage.count {
            self.storage.removeFirst(self.head)
            self.head = 0
        }
        return element
    }

    /// The element `offset` places behind the first.
    subscript(offset offset: Int) -> Element {
        get { self.storage[self.head + offset] }
        set { self.storage[self.head + offset] = newValue }
    }
}

extension FIFO: Sendable where Element: Sendable {}
