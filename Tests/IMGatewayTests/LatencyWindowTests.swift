import Testing

@testable import IMGateway

@Suite("LatencyWindow: a percentile over the last ten seconds")
struct LatencyWindowTests {
    @Test("buckets: exact below 8, within 12.5% above; every value lies in its bucket")
    func buckets() {
        for value: UInt64 in [0, 1, 7, 8, 9, 15, 16, 100, 999, 1000, 123_456, 9_999_999] {
            let bucket = LatencyWindow.bucket(of: value)
            #expect(LatencyWindow.upperBound(of: bucket) >= value)
            if bucket > 0 { #expect(LatencyWindow.upperBound(of: bucket - 1) < value) }
            #expect(Double(LatencyWindow.upperBound(of: bucket)) <= Double(value) * 1.125 + 1)
        }
    }

    @Test("p99 of 1,000 values: the tenth largest's bucket; p50 the middle's")
    func percentile() {
        var window = LatencyWindow()
        for value in 1...1000 { window.record(microseconds: UInt64(value * 10), second: 100) }
        let p99 = window.percentile(0.99, second: 100)!
        #expect(p99 >= 9900 && Double(p99) <= 9900 * 1.125)
        let p50 = window.percentile(0.5, second: 105)!
        #expect(p50 >= 5000 && Double(p50) <= 5000 * 1.125)
    }

    @Test("only the last ten seconds count; an empty window has none")
    func window() {
        var window = LatencyWindow()
        #expect(window.percentile(0.99, second: 0) == nil)
        for _ in 0..<2 { window.record(microseconds: 1_000_000, second: 10) }  // 2 in 102: above the p99 rank of 101
        for _ in 0..<100 { window.record(microseconds: 100, second: 15) }
        #expect(window.percentile(0.99, second: 15)! >= 1_000_000)
        #expect(window.percentile(0.99, second: 20)! < 120)  // second 10 has left the window
        #expect(window.percentile(0.99, second: 25) == nil)
        // A slot reused for a later second starts empty.
        window.record(microseconds: 50, second: 30)
        #expect(window.percentile(1, second: 30)! < 60)
    }
}
