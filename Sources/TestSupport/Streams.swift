/// Collects up to `count` elements of a stream, or what arrived within
/// `timeout`, whichever comes first. Tests use it to wait for signals
/// without hanging when one never comes.
public func collect<S: AsyncSequence & Sendable>(
    _ stream: S, count: Int, within timeout: Duration = .seconds(5)
) async -> [S.Element] where S.Element: Sendable {
    await withTaskGroup(of: [S.Element]?.self) { group in
        group.addTask {
            var items: [S.Element] = []
            do {
                for try await item in stream {
                    items.append(item)
                    if items.count >= count { break }
                }
            } catch {}
            return items
        }
        group.addTask {
            try? await Task.sleep(for: timeout)
            return nil
        }
        // Whichever finishes first, cancel the other; the consumer, cancelled,
        // returns what it had collected.
        var result: [S.Element] = []
        for await items in group {
            group.cancelAll()
            if let items { result = items }
        }
        return result
    }
}

/// Collects the elements of a stream up to and including the first for
/// which `stop` is true, or what arrived within `timeout`.
public func collect<S: AsyncSequence & Sendable>(
    _ stream: S, until stop: @escaping @Sendable (S.Element) -> Bool, within timeout: Duration = .seconds(5)
) async -> [S.Element] where S.Element: Sendable {
    await withTaskGroup(of: [S.Element]?.self) { group in
        group.addTask {
            var items: [S.Element] = []
            do {
                for try await item in stream {
                    items.append(item)
                    if stop(item) { break }
                }
            } catch {}
            return items
        }
        group.addTask {
            try? await Task.sleep(for: timeout)
            return nil
        }
        var result: [S.Element] = []
        for await items in group {
            group.cancelAll()
            if let items { result = items }
        }
        return result
    }
}
