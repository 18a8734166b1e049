"""The RunPod REST API v2: the client, pod names that carry their tag, create bodies, the
in-pod self-stop."""
