"""Live views of a sandbox's screen, both ends of the stream.

Owns: the host's relays of a sandbox's VNC stream and screencast to WebSockets (relay), the web side's
client of those sockets (client), the view-only RFB filter (rfb) and the WebRTC peer (webrtc).
Calls: base, the pool's `Managed` (types only). Called by: host (relay), webapp.sandboxes.consumers.
"""
