// The protocol's types appear in this module's API (error codes, content, presence status):
// `import IMClient` is enough to use them.
@_exported import IMWire
