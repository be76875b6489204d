"""The ``read_file`` and ``write_file`` tools: a sandbox's work directory, without a shell.

Paths are relative to the work directory (``/work/...`` is accepted too); a path that leaves it,
a missing file or a directory is answered with an ``error: ...`` text (a valid call with a failed
result, like a shell command that fails), never an exception. Only malformed arguments raise
``ToolError``.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from tools.base import Tool

MAX_WRITE_CHARS = 65536


class ReadFileArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(description="file path, relative to the work directory")


class WriteFileArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(description="file path, relative to the work directory; parent directories are created")
    content: str = Field(max_length=MAX_WRITE_CHARS, description="the whole new content of the file")


class ReadFileTool(Tool):
    name = "read_file"
    description = "Read a text file of the work directory; returns its content."
    Args = ReadFileArgs

    def __init__(self, sandbox, max_output_chars: int = 4000):
        self.sandbox = sandbox
        self.max_output_chars = max_output_chars

    async def run(self, args: ReadFileArgs) -> str:
        try:
            text = await self.sandbox.read_file(args.path)
        except (OSError, ValueError) as e:
            return f"error: {e}"
        if len(text) > self.max_output_chars:
            half = self.max_output_chars // 2
            text = text[:half] + f"\n...[{len(text) - 2 * half} characters truncated]...\n" + text[-half:]
        return text


class WriteFileTool(Tool):
    name = "write_file"
    description = "Create or overwrite a text file of the work directory with the given content."
    Args = WriteFileArgs

    def __init__(self, sandbox):
        self.sandbox = sandbox

    async def run(self, args: WriteFileArgs) -> str:
        try:
            await self.sandbox.write_file(args.path, args.content)
        except (OSError, ValueError) as e:
            return f"error: {e}"
        return f"wrote {len(args.content.encode())} bytes to {args.path}"
