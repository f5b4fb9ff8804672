"""WebSocket server: sans-I/O wire protocol (`protocol`) kept apart from the asyncio I/O."""
