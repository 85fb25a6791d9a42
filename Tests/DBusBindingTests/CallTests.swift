import DBusBinding
import Testing

@Suite("Calls: errors, timeouts, concurrency", .timeLimit(.minutes(5)))
struct CallTests {
    @Test func errorsKeepTheirNameAndMessageBothWays() async throws {
        try await withEchoFixture { fixture throws in
            for name in ["org.bluez.Error.InProgress", "org.bluez.Error.Failed", "com.example.Unheard.Of.Error"] {
                let error = await #expect(throws: BusError.self) {
                    try await fixture.call("Fail", [.string(name), .string("le-connection-abort-by-local")])
                }
                #expect(error?.name.rawValue == name)
                #expect(error?.message == "le-connection-abort-by-local")
            }
            let inProgress = await #expect(throws: BusError.self) {
                try await fixture.call("Fail", ["org.bluez.Error.InProgress", "busy"])
            }
            #expect(inProgress?.name == .bluez.inProgress)
        }
    }

    @Test func anInvalidErrorNameFromAHandlerBecomesFailed() async throws {
        try await withEchoFixture { fixture throws in
            let error = await #expect(throws: BusError.self) {
                try await fixture.call("Fail", ["not a valid error name", "text"])
            }
            #expect(error?.name == .failed)
            #expect(error?.message == "text")
            let swiftError = await #expect(throws: BusError.self) { try await fixture.call("ThrowSwiftError") }
            #expect(swiftError?.name == .failed)
            #expect(swiftError?.message.contains("a plain Swift error") == true)
        }
    }

    @Test func theServerAnswersMistakesWithStandardErrors() async throws {
        try await withEchoFixture { fixture throws in
            let wrongArgs = await #expect(throws: BusError.self) { try await fixture.call("Add", [.string("2")]) }
            #expect(wrongArgs?.name == .invalidArgs)
            let noMethod = await #expect(throws: BusError.self) { try await fixture.call("Subtract") }
            #expect(noMethod?.name == .unknownMethod)
            let noObject = await #expect(throws: BusError.self) {
                try await fixture.client.call(EchoFixture.name, "/nowhere", EchoFixture.interface, "Add")
            }
            #expect(noObject?.name == .unknownObject)
            let noInterface = await #expect(throws: BusError.self) {
                try await fixture.client.call(EchoFixture.name, EchoFixture.path, "org.example.Other", "Add")
            }
            #expect(noInterface?.name == .unknownInterface)
            let wrongReply = await #expect(throws: BusError.self) { try await fixture.call("WrongReply") }
            #expect(wrongReply?.name == .failed)
            let noService = await #expect(throws: BusError.self) {
                try await fixture.client.call("org.example.Nobody", "/", EchoFixture.interface, "Add")
            }
            // Without auto-start the bus answers NameHasNoOwner (bluetoothd
            // not running looks like this).
            #expect(noService?.name == .nameHasNoOwner)
            // After all of that, both ends still work.
            #expect(try await fixture.call("Add", [.int32(40), .int32(2)]).body == [.int32(42)])
        }
    }

    @Test func aTimeoutFiresAndForgetsThePendingCall() async throws {
        try await withEchoFixture { fixture throws in
            let clock = ContinuousClock()
            let started = clock.now
            let error = await #expect(throws: BusError.self) {
                try await fixture.call("NeverReply", timeout: .milliseconds(200))
            }
            #expect(error?.name == .noReply)
            #expect(clock.now - started >= .milliseconds(200))
            #expect(await fixture.client.pendingCallCount == 0)
            #expect(await fixture.server.activeHandlerCount == 1)
            // The connection is still good, and a late reply cannot confuse it.
            #expect(try await fixture.call("Delayed", [.uint32(10)]).body == [.uint32(10)])
            #expect(await fixture.client.pendingCallCount == 0)
        }
    }

    @Test func cancellingTheCallerCancelsTheCall() async throws {
        try await withEchoFixture { fixture throws in
            let task = Task { try await fixture.call("NeverReply", timeout: .seconds(300)) }
            try await fixture.handlerEntered("NeverReply")
            task.cancel()
            await #expect(throws: CancellationError.self) { try await task.value }
            #expect(await fixture.client.pendingCallCount == 0)
        }
    }

    @Test func aThousandConcurrentCallsFromManyTasks() async throws {
        try await withEchoFixture { fixture throws in
            let results = try await withThrowingTaskGroup(of: (Int32, [BusValue]).self) { group in
                for index in Int32(0)..<1000 {
                    group.addTask {
                        let reply = try await fixture.call("Add", [.int32(index), .int32(1_000_000)])
                        return (index, reply.body)
                    }
                }
                var results: [Int32: [BusValue]] = [:]
                for try await (index, body) in group { results[index] = body }
                return results
            }
            #expect(results.count == 1000)
            for (index, body) in results { #expect(body == [.int32(index + 1_000_000)]) }
            #expect(await fixture.client.pendingCallCount == 0)
        }
    }

    @Test func aSlowReplyDoesNotHoldUpAFastOne() async throws {
        try await withEchoFixture { fixture throws in
            // The slow call is still pending when the fast one, sent after
            // it, has its answer: replies are matched by serial, not order.
            let slow = Task { try await fixture.call("Delayed", [.uint32(600_000)], timeout: .seconds(900)) }
            try await fixture.handlerEntered("Delayed")
            #expect(try await fixture.call("Delayed", [.uint32(1)]).body == [.uint32(1)])
            #expect(await fixture.client.pendingCallCount == 1)
            slow.cancel()
            await #expect(throws: CancellationError.self) { try await slow.value }
        }
    }

    @Test func aClosedConnectionFailsWhatIsPendingAndWhatComesAfter() async throws {
        try await withEchoFixture { fixture throws in
            let pending = Task { try await fixture.call("NeverReply", timeout: .seconds(300)) }
            try await fixture.handlerEntered("NeverReply")
            await fixture.client.close()
            let error = await #expect(throws: BusError.self) { try await pending.value }
            #expect(error?.name == .disconnected)
            #expect(await fixture.client.isConnected == false)
            let after = await #expect(throws: BusError.self) { try await fixture.call("Add", [.int32(1), .int32(1)]) }
            #expect(after?.name == .disconnected)
        }
    }

    @Test func theBusGoingAwayFailsPendingCalls() async throws {
        try await withEchoFixture { fixture throws in
            let pending = Task { try await fixture.call("NeverReply", timeout: .seconds(300)) }
            try await fixture.handlerEntered("NeverReply")
            await fixture.bus.stop()
            let error = await #expect(throws: BusError.self) { try await pending.value }
            #expect(error?.name == .disconnected)
            #expect(await fixture.client.isConnected == false)
        }
    }

    @Test func wellKnownNamesAreRequestedQueuedAndReleased() async throws {
        try await withEchoFixture { fixture throws in
            #expect(fixture.client.uniqueName.hasPrefix(":"))
            #expect(fixture.client.uniqueName != fixture.server.uniqueName)
            let other = try await BusConnection.connect(.address(fixture.bus.address))
            #expect(try await other.requestName(EchoFixture.name) == .exists)
            #expect(try await other.requestName(EchoFixture.name, flags: []) == .inQueue)
            #expect(try await fixture.server.requestName(EchoFixture.name) == .alreadyOwner)
            #expect(try await fixture.server.releaseName(EchoFixture.name) == .released)
            // The queued connection takes the name over.
            #expect(try await fixture.client.nameOwner(of: EchoFixture.name) == other.uniqueName)
            #expect(try await fixture.server.releaseName("org.example.NeverOwned") == .nonExistent)
            #expect(try await fixture.server.releaseName(EchoFixture.name) == .notOwner)
            await other.close()
        }
    }

    @Test func connectingToNothingIsAnError() async throws {
        let missing = await #expect(throws: BusError.self) {
            try await BusConnection.connect(.address("unix:path=/nonexistent/beaconbench/bus"))
        }
        #expect(missing?.name.rawValue.hasPrefix("org.freedesktop.DBus.Error.") == true)
        let garbage = await #expect(throws: BusError.self) { try await BusConnection.connect(.address("garbage")) }
        #expect(garbage?.name == .badAddress)
    }
}
