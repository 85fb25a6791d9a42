/// Collects up to `count` elements of a stream, or what arrived within
/// `timeout`, whichever comes first. Tests use it to wait for signals
/// without hanging when one never comes.
public func collect<S: AsyncSequence & Sendable>(
    _ stream: S, count: Int, within timeout: Duration = .seconds(5)
) async -> [S.Element] where S.Element: Sendable {
    await collect(stream, within: timeout) { $0.count >= count }
}

/// Collects the elements of a stream up to and including the first for
/// which `stop` is true, or what arrived within `timeout`.
public func collect<S: AsyncSequence & Sendable>(
    _ stream: S, until stop: @escaping @Sendable (S.Element) -> Bool, within timeout: Duration = .seconds(5)
) async -> [S.Element] where S.Element: Sendable {
    await collect(stream, within: timeout) { items in items.last.map(stop) ?? false }
}

private func collect<S: AsyncSequence & Sendable>(
    _ stream: S, within timeout: Duration, done: @escaping @Sendable ([S.Element]) -> Bool
) async -> [S.Element] where S.Element: Sendable {
    await withTaskGroup(of: [S.Element]?.self) { group in
        group.addTask {
            var items: [S.Element] = []
            if done(items) { return items }
            do {
                for try await item in stream {
                    items.append(item)
                    if done(items) { break }
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

/// Makes a resource, runs `body` with it, and always stops it, also when
/// `body` throws: the shape of every test fixture here.
public func withResource<Resource>(
    _ make: () async throws -> Resource, stop: (Resource) async -> Void, _ body: (Resource) async throws -> Void
) async throws {
    let resource = try await make()
    do {
        try await body(resource)
    } catch {
        await stop(resource)
        throw error
    }
    await stop(resource)
}
